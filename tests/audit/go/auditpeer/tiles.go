// The log as C2SP tlog-tiles (docs/formats/audit-log.md, section 13), read the way any
// tlog-tiles client reads it: x/mod's tlog.TileHashReader fetches the hash tiles a tree of
// a checkpoint's size needs and checks each against that checkpoint's root; the entry
// bundles are split by their u16 lengths and every entry must hash to its leaf in the
// tiles and equal the entry in audit.log.
//
//	auditpeer tiles LOGDIR VKEY SOURCE CHECKPOINT...
//	    SOURCE is a directory (LOGDIR/tiles) or an https:// URL prefix (the broker's
//	    /v1/audit-log; the CA comes from SSL_CERT_FILE). Each CHECKPOINT is a signed note of
//	    the log, the newest last: the tiles must serve every one of them (a partial tile that
//	    a full one replaced is read from the full one, as the spec allows), inclusion proofs
//	    made from the tiles must check, and consistency proofs between consecutive ones too.
//	    SOURCE's own checkpoint must be the last one.
package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type tileSource struct {
	base      string
	fallbacks int // partial tiles read from their full tile
	fetched   int
}

// get returns the resource at rel, or nil when it does not exist.
func (s *tileSource) get(rel string) []byte {
	s.fetched++
	if strings.HasPrefix(s.base, "https://") {
		resp, err := http.Get(s.base + "/" + rel)
		if err != nil {
			fail("GET %s: %v", rel, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			fail("GET %s: %v", rel, err)
		}
		if resp.StatusCode == http.StatusNotFound {
			return nil
		}
		if resp.StatusCode != http.StatusOK {
			fail("GET %s: HTTP %d", rel, resp.StatusCode)
		}
		return body
	}
	b, err := os.ReadFile(filepath.Join(s.base, rel))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		fail("%v", err)
	}
	return b
}

// c2spPath is the tlog-tiles path of a tile: x/mod's Tile.Path() writes the sumdb form
// tile/H/L/N with the height in it; tlog-tiles drops the height (always 8).
func c2spPath(level string, n int64, w int) string {
	elems := []string{}
	for {
		elems = append([]string{fmt.Sprintf("%03d", n%1000)}, elems...)
		n /= 1000
		if n == 0 {
			break
		}
	}
	for i := 0; i < len(elems)-1; i++ {
		elems[i] = "x" + elems[i]
	}
	p := "tile/" + level + "/" + strings.Join(elems, "/")
	if w < 256 {
		p += fmt.Sprintf(".p/%d", w)
	}
	return p
}

// getTile reads a tile or bundle of width w, from its full form when the partial one is gone.
func (s *tileSource) getTile(level string, n int64, w int, cut func(full []byte, w int) []byte) []byte {
	if b := s.get(c2spPath(level, n, w)); b != nil {
		return b
	}
	if w < 256 {
		if full := s.get(c2spPath(level, n, 256)); full != nil {
			s.fallbacks++
			return cut(full, w)
		}
	}
	fail("%s is served neither partial nor full", c2spPath(level, n, w))
	return nil
}

func (s *tileSource) Height() int { return 8 }

func (s *tileSource) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, t := range tiles {
		if t.H != 8 || t.L < 0 {
			return nil, fmt.Errorf("unexpected tile %+v", t)
		}
		out[i] = s.getTile(fmt.Sprint(t.L), t.N, t.W, func(full []byte, w int) []byte {
			if len(full) != 256*tlog.HashSize {
				fail("full tile %d/%d is %d bytes", t.L, t.N, len(full))
			}
			return full[:w*tlog.HashSize]
		})
	}
	return out, nil
}

func (s *tileSource) SaveTiles([]tlog.Tile, [][]byte) {}

func splitBundle(b []byte) [][]byte {
	var out [][]byte
	for pos := 0; pos < len(b); {
		if len(b)-pos < 2 {
			fail("entry bundle: length prefix cut short")
		}
		n := int(binary.BigEndian.Uint16(b[pos:]))
		if n == 0 || len(b)-pos-2 < n {
			fail("entry bundle: entry of %d bytes at byte %d", n, pos)
		}
		out = append(out, b[pos+2:pos+2+n])
		pos += 2 + n
	}
	if len(out) > 256 {
		fail("entry bundle of %d entries", len(out))
	}
	return out
}

func checkTiles(l *logFile, v note.Verifier, source string, checkpoints []string) {
	src := &tileSource{base: strings.TrimSuffix(source, "/")}
	served := src.get("checkpoint")
	if served == nil {
		fail("%s serves no checkpoint", source)
	}
	var prev *tlog.Tree
	for ci, path := range checkpoints {
		msg, err := os.ReadFile(path)
		if err != nil {
			fail("%v", err)
		}
		size, root := openCheckpoint(msg, v)
		if ci == len(checkpoints)-1 {
			if servedSize, servedRoot := openCheckpoint(served, v); servedSize != size || servedRoot != root {
				fail("the served checkpoint (size %d) is not %s (size %d)", servedSize, path, size)
			}
		}
		tree := tlog.Tree{N: size, Hash: root}
		hr := tlog.TileHashReader(tree, src)
		if size > 0 {
			h, err := tlog.TreeHash(size, hr)
			if err != nil || h != root {
				fail("tree of size %d from the tiles: %v", size, err)
			}
		}
		// Every entry of the tree from the bundles: its leaf hash, from tiles checked against the root.
		leafIndexes := make([]int64, size)
		for i := range leafIndexes {
			leafIndexes[i] = tlog.StoredHashIndex(0, int64(i))
		}
		leaves, err := hr.ReadHashes(leafIndexes)
		if err != nil {
			fail("leaf hashes of the tree of size %d: %v", size, err)
		}
		for b := int64(0); b*256 < size; b++ {
			w := int(min64(256, size-b*256))
			bundle := splitBundle(src.getTile("entries", b, w, func(full []byte, w int) []byte { return full }))
			if len(bundle) < w {
				fail("entry bundle %d holds %d entries, the tree of size %d needs %d", b, len(bundle), size, w)
			}
			if w < 256 && len(bundle) != w && src.get(c2spPath("entries", b, w)) != nil {
				fail("partial entry bundle %d.p/%d holds %d entries", b, w, len(bundle))
			}
			for k := 0; k < w; k++ {
				i := b*256 + int64(k)
				if tlog.RecordHash(bundle[k]) != leaves[i] {
					fail("entry %d in bundle %d does not hash to its leaf in the tiles", i, b)
				}
				if i >= int64(len(l.entries)) || string(bundle[k]) != string(l.entries[i]) {
					fail("entry %d in the bundles differs from audit.log", i)
				}
			}
		}
		// Proofs computed from the tiles alone.
		for _, i := range []int64{0, size / 2, size - 1} {
			if size == 0 {
				break
			}
			p, err := tlog.ProveRecord(size, i, hr)
			if err != nil {
				fail("tlog.ProveRecord(%d, %d) from the tiles: %v", size, i, err)
			}
			if err := tlog.CheckRecord(p, size, root, i, leaves[i]); err != nil {
				fail("inclusion of %d in %d from the tiles: %v", i, size, err)
			}
		}
		if prev != nil && prev.N > 0 {
			p, err := tlog.ProveTree(size, prev.N, hr)
			if err != nil {
				fail("tlog.ProveTree(%d, %d) from the tiles: %v", size, prev.N, err)
			}
			if err := tlog.CheckTree(p, size, root, prev.N, prev.Hash); err != nil {
				fail("consistency %d -> %d from the tiles: %v", prev.N, size, err)
			}
		}
		prev = &tree
	}
	fmt.Printf("OK: tiles at %s serve %d checkpoints (newest size %d): every entry in the bundles hashes to its leaf, "+
		"tiles checked by tlog.TileHashReader, proofs from them check; %d fetches, %d partial tiles read from full ones\n",
		source, len(checkpoints), prev.N, src.fetched, src.fallbacks)
}

func min64(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}
