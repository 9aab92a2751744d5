// auditpeer: an independent peer of enclave-audit, written from docs/formats/audit-log.md
// (sections 2, 4, 4.1 and 8) on Go's golang.org/x/mod/sumdb/note and sumdb/tlog, the
// reference implementations of C2SP signed notes and of RFC 6962 trees in the Go ecosystem.
//
//	auditpeer verify LOGDIR VKEY CHECKPOINT [PROOF.json ...]
//	    opens CHECKPOINT with note.Open and the verifier key (file VKEY); reads LOGDIR/audit.log,
//	    computes the tree with tlog and checks every chained head record: its chain link, its
//	    checkpoint (rebuilt as a signed note and opened with note.Open) and its root (tlog.TreeHash);
//	    the latest head must be CHECKPOINT's tree; then checks each proof with tlog.CheckRecord
//	    (inclusion) or tlog.CheckTree (consistency), its checkpoints opened with note.Open.
//	auditpeer prove LOGDIR VKEY OUTDIR
//	    writes proofs made by tlog.ProveRecord and tlog.ProveTree, in the form of section 8,
//	    with the log's own checkpoints, for enclave-audit verify-proof to check.
//	auditpeer cosigned ... | submit ...
//	    witness cosignatures (witness.go, docs/formats/witness.md).
//	auditpeer tiles LOGDIR VKEY SOURCE CHECKPOINT...
//	    the log as C2SP tlog-tiles, from a directory or a URL (tiles.go).
//
// Exit 0 when everything holds, 1 with one line on stderr otherwise.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "auditpeer: "+format+"\n", args...)
	os.Exit(1)
}

type head struct {
	size, index int64
	prev, root  tlog.Hash
	noteSig     []byte
	payload     []byte
}

type logFile struct {
	entries [][]byte
	heads   []head
	hashes  []tlog.Hash // tlog's stored hashes
}

func (l *logFile) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(l.hashes)) {
			return nil, fmt.Errorf("stored hash %d not available", x)
		}
		out[i] = l.hashes[x]
	}
	return out, nil
}

// readLog parses section 2 and keeps entries and chained heads (type 3). Legacy heads are
// outside what this peer checks: it refuses them, so a test log must be a version 2 log.
func readLog(dir string) *logFile {
	data, err := os.ReadFile(filepath.Join(dir, "audit.log"))
	if err != nil {
		fail("%v", err)
	}
	if len(data) < 48 || string(data[:8]) != "EAUDITLG" || binary.LittleEndian.Uint32(data[8:]) != 2 {
		fail("audit.log: not a version 2 audit log")
	}
	l := &logFile{}
	for pos := 48; pos < len(data); {
		if len(data)-pos < 20 || string(data[pos:pos+4]) != "EAR1" {
			fail("offset %d: bad record", pos)
		}
		n := int(binary.LittleEndian.Uint32(data[pos+8:]))
		if len(data)-pos < 20+n {
			fail("offset %d: record cut short", pos)
		}
		sum := sha256.Sum256(data[pos : pos+12+n])
		if !bytes.Equal(sum[:8], data[pos+12+n:pos+20+n]) {
			fail("offset %d: record check", pos)
		}
		payload := data[pos+12 : pos+12+n]
		switch {
		case data[pos+4] == 1:
			h, err := tlog.StoredHashes(int64(len(l.entries)), payload, l)
			if err != nil {
				fail("%v", err)
			}
			l.hashes = append(l.hashes, h...)
			l.entries = append(l.entries, payload)
		case data[pos+4] == 3 && n == 216:
			var h head
			h.size = int64(binary.LittleEndian.Uint64(payload[0:]))
			h.index = int64(binary.LittleEndian.Uint64(payload[16:]))
			copy(h.prev[:], payload[24:56])
			copy(h.root[:], payload[56:88])
			h.noteSig = payload[152:216]
			h.payload = payload
			l.heads = append(l.heads, h)
		default:
			fail("offset %d: record type %d (length %d) is not an entry or a chained head", pos, data[pos+4], n)
		}
		pos += 20 + n
	}
	return l
}

func readVerifier(path string) note.Verifier {
	b, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	v, err := note.NewVerifier(strings.TrimSuffix(string(b), "\n"))
	if err != nil {
		fail("%s: %v", path, err)
	}
	return v
}

// openCheckpoint: note.Open, then the three lines of a C2SP checkpoint with the origin
// equal to the key name.
func openCheckpoint(msg []byte, v note.Verifier) (int64, tlog.Hash) {
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		fail("note.Open: %v", err)
	}
	lines := strings.Split(n.Text, "\n")
	if len(lines) != 4 || lines[0] != v.Name() || lines[3] != "" {
		fail("checkpoint text is not origin, size, root: %q", n.Text)
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 {
		fail("checkpoint size %q", lines[1])
	}
	root, err := tlog.ParseHash(lines[2])
	if err != nil {
		fail("checkpoint root %q: %v", lines[2], err)
	}
	return size, root
}

// The signed note of a head record, rebuilt from section 4.1: body, blank line, one line.
func headNote(v note.Verifier, h head, key []byte) []byte {
	body := fmt.Sprintf("%s\n%d\n%s\n", v.Name(), h.size, base64.StdEncoding.EncodeToString(h.root[:]))
	kh := keyHash(v.Name(), key)
	sig := base64.StdEncoding.EncodeToString(append(kh, h.noteSig...))
	return []byte(body + "\n\u2014 " + v.Name() + " " + sig + "\n")
}

func keyHash(name string, key []byte) []byte {
	s := sha256.Sum256(append(append([]byte(name+"\n"), 1), key...))
	return s[:4]
}

func publicKey(vkeyPath string) []byte {
	b, _ := os.ReadFile(vkeyPath)
	parts := strings.SplitN(strings.TrimSpace(string(b)), "+", 3) // base64 may hold a +
	raw, err := base64.StdEncoding.DecodeString(parts[len(parts)-1])
	if err != nil || len(raw) != 33 || raw[0] != 1 {
		fail("verifier key: not an Ed25519 key")
	}
	return raw[1:]
}

func hexHash(s string) tlog.Hash {
	var h tlog.Hash
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		fail("bad hash %q", s)
	}
	copy(h[:], b)
	return h
}

type proofFile struct {
	Format        string   `json:"format"`
	Version       int      `json:"version"`
	Proof         string   `json:"proof"`
	LeafIndex     *int64   `json:"leaf_index,omitempty"`
	Entry         *string  `json:"entry,omitempty"`
	LeafHash      string   `json:"leaf_hash,omitempty"`
	TreeSize      int64    `json:"tree_size,omitempty"`
	Root          string   `json:"root,omitempty"`
	OldSize       int64    `json:"old_size,omitempty"`
	OldRoot       string   `json:"old_root,omitempty"`
	NewSize       int64    `json:"new_size,omitempty"`
	NewRoot       string   `json:"new_root,omitempty"`
	Path          []string `json:"path"`
	Checkpoint    string   `json:"checkpoint,omitempty"`
	OldCheckpoint string   `json:"old_checkpoint,omitempty"`
	NewCheckpoint string   `json:"new_checkpoint,omitempty"`
}

func checkProof(path string, v note.Verifier) {
	b, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	var p proofFile
	if err := json.Unmarshal(b, &p); err != nil || p.Format != "enclave-audit-proof" || p.Version != 1 {
		fail("%s: not an enclave-audit-proof", path)
	}
	hashes := make([]tlog.Hash, len(p.Path))
	for i, h := range p.Path {
		hashes[i] = hexHash(h)
	}
	switch p.Proof {
	case "inclusion":
		size, root := openCheckpoint([]byte(p.Checkpoint), v)
		if size != p.TreeSize || root != hexHash(p.Root) {
			fail("%s: the checkpoint is not the proof's tree", path)
		}
		leaf := tlog.Hash{}
		if p.Entry != nil {
			leaf = tlog.RecordHash([]byte(*p.Entry))
		} else {
			leaf = hexHash(p.LeafHash)
		}
		if p.LeafIndex == nil {
			fail("%s: no leaf_index", path)
		}
		if err := tlog.CheckRecord(tlog.RecordProof(hashes), size, root, *p.LeafIndex, leaf); err != nil {
			fail("%s: tlog.CheckRecord: %v", path, err)
		}
	case "consistency":
		oldSize, oldRoot := openCheckpoint([]byte(p.OldCheckpoint), v)
		newSize, newRoot := openCheckpoint([]byte(p.NewCheckpoint), v)
		if oldSize != p.OldSize || newSize != p.NewSize || oldRoot != hexHash(p.OldRoot) || newRoot != hexHash(p.NewRoot) {
			fail("%s: the checkpoints are not the proof's trees", path)
		}
		if err := tlog.CheckTree(tlog.TreeProof(hashes), newSize, newRoot, oldSize, oldRoot); err != nil {
			fail("%s: tlog.CheckTree: %v", path, err)
		}
	default:
		fail("%s: unknown proof kind %q", path, p.Proof)
	}
}

func verifyHeads(l *logFile, v note.Verifier, key []byte) {
	for i, h := range l.heads {
		var want tlog.Hash
		if i > 0 {
			want = sha256.Sum256(l.heads[i-1].payload)
		}
		if h.index != int64(i) || h.prev != want {
			fail("head record %d (size %d): broken chain (head_index %d)", i, h.size, h.index)
		}
		size, root := openCheckpoint(headNote(v, h, key), v)
		th, err := tlog.TreeHash(size, l)
		if size == 0 {
			th = sha256.Sum256(nil) // RFC 6962 MTH({}); tlog.TreeHash(0) is the zero hash
		}
		if err != nil || th != root {
			fail("head record %d: root is not tlog.TreeHash(%d)", i, size)
		}
	}
}

func main() {
	if len(os.Args) < 5 {
		fail("usage: auditpeer verify LOGDIR VKEY CHECKPOINT [PROOF...] | prove LOGDIR VKEY OUTDIR | " +
			"cosigned LOGDIR VKEY POLICY COSIGNED | submit LOGDIR VKEY URL WITNESS_VKEY | tiles LOGDIR VKEY SOURCE CHECKPOINT...")
	}
	l := readLog(os.Args[2])
	v := readVerifier(os.Args[3])
	key := publicKey(os.Args[3])
	verifyHeads(l, v, key)
	switch os.Args[1] {
	case "verify":
		cp, err := os.ReadFile(os.Args[4])
		if err != nil {
			fail("%v", err)
		}
		size, root := openCheckpoint(cp, v)
		last := l.heads[len(l.heads)-1]
		if size != last.size || root != last.root || size != int64(len(l.entries)) {
			fail("the checkpoint (size %d) is not the log's latest head (size %d)", size, last.size)
		}
		for _, p := range os.Args[5:] {
			checkProof(p, v)
		}
		fmt.Printf("OK: %d entries, %d chained heads, checkpoint of size %d, %d proofs, checked with x/mod sumdb/note and sumdb/tlog\n",
			len(l.entries), len(l.heads), size, len(os.Args)-5)
	case "prove":
		noteOf := map[int64]string{}
		for _, h := range l.heads {
			noteOf[h.size] = string(headNote(v, h, key))
		}
		n := int64(len(l.entries))
		hexOf := func(h tlog.Hash) string { return hex.EncodeToString(h[:]) }
		write := func(name string, p proofFile) {
			b, _ := json.Marshal(p)
			if err := os.WriteFile(filepath.Join(os.Args[4], name), b, 0o644); err != nil {
				fail("%v", err)
			}
		}
		root, _ := tlog.TreeHash(n, l)
		for _, i := range []int64{0, n / 2, n - 1} {
			i := i
			rp, err := tlog.ProveRecord(n, i, l)
			if err != nil {
				fail("tlog.ProveRecord: %v", err)
			}
			path := []string{}
			for _, h := range rp {
				path = append(path, hexOf(h))
			}
			write(fmt.Sprintf("go-inclusion-%d.json", i), proofFile{Format: "enclave-audit-proof", Version: 1,
				Proof: "inclusion", LeafIndex: &i, LeafHash: hexOf(tlog.RecordHash(l.entries[i])), TreeSize: n,
				Root: hexOf(root), Path: path, Checkpoint: noteOf[n]})
		}
		for _, m := range []int64{1, n / 2, n - 1} {
			tp, err := tlog.ProveTree(n, m, l)
			if err != nil {
				fail("tlog.ProveTree: %v", err)
			}
			path := []string{}
			for _, h := range tp {
				path = append(path, hexOf(h))
			}
			old, _ := tlog.TreeHash(m, l)
			write(fmt.Sprintf("go-consistency-%d.json", m), proofFile{Format: "enclave-audit-proof", Version: 1,
				Proof: "consistency", OldSize: m, OldRoot: hexOf(old), NewSize: n, NewRoot: hexOf(root), Path: path,
				OldCheckpoint: noteOf[m], NewCheckpoint: noteOf[n]})
		}
		fmt.Printf("OK: wrote 3 inclusion and 3 consistency proofs made by tlog for the tree of size %d\n", n)
	case "cosigned":
		if len(os.Args) != 6 {
			fail("usage: auditpeer cosigned LOGDIR VKEY POLICY COSIGNED")
		}
		checkCosigned(l, v, os.Args[4], os.Args[5])
	case "tiles":
		if len(os.Args) < 6 {
			fail("usage: auditpeer tiles LOGDIR VKEY SOURCE CHECKPOINT...")
		}
		checkTiles(l, v, os.Args[4], os.Args[5:])
	case "submit":
		if len(os.Args) != 6 {
			fail("usage: auditpeer submit LOGDIR VKEY URL WITNESS_VKEY")
		}
		submit(l, v, key, os.Args[4], os.Args[5])
	default:
		fail("unknown command %q", os.Args[1])
	}
}
