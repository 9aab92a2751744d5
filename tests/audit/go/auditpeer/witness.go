// Witness cosignatures, written from docs/formats/witness.md and the C2SP texts
// (tlog-cosignature, tlog-witness, tlog-policy) with crypto/ed25519 and net/http only:
// golang.org/x/mod 0.7 predates cosignature/v1.
//
//	auditpeer cosigned LOGDIR VKEY POLICY COSIGNED
//	    COSIGNED must open with note.Open and the log key, name a chained head of the log, and
//	    carry cosignature/v1 lines of the POLICY's witnesses that satisfy its quorum.
//	auditpeer submit LOGDIR VKEY URL WITNESS_VKEY
//	    POSTs the log's latest checkpoint to URL/add-checkpoint (old 0 first; on 409 the
//	    witness's size, with a tlog.ProveTree proof), checks the cosignature with the witness
//	    key and prints the line.
package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type cosigner struct {
	name  string // the signer's key name
	keyID []byte
	key   ed25519.PublicKey
}

// parseCosignerKey reads name+hexid+base64(0x04||key) and checks the key id.
func parseCosignerKey(vkey string) cosigner {
	name, rest, ok := strings.Cut(vkey, "+")
	id, b64, ok2 := strings.Cut(rest, "+")
	raw, err := base64.StdEncoding.DecodeString(b64)
	if !ok || !ok2 || err != nil || len(raw) != 33 || raw[0] != 4 {
		fail("%q is not a cosignature/v1 verifier key", vkey)
	}
	sum := sha256.Sum256(append([]byte(name+"\n\x04"), raw[1:]...))
	if fmt.Sprintf("%x", sum[:4]) != id {
		fail("%q: the key id does not match", vkey)
	}
	return cosigner{name, sum[:4], ed25519.PublicKey(raw[1:])}
}

// cosignedBy returns the time of w's valid cosignature of the note, or false when the note
// has no line of w; a line of w that does not verify fails.
func cosignedBy(text string, sigLines []string, w cosigner) (uint64, bool) {
	for _, line := range sigLines {
		name, b64, ok := strings.Cut(strings.TrimPrefix(line, "\u2014 "), " ")
		blob, err := base64.StdEncoding.DecodeString(b64)
		if !ok || err != nil || name != w.name || len(blob) < 4 || !bytes.Equal(blob[:4], w.keyID) {
			continue
		}
		if len(blob) != 76 {
			fail("the cosignature of %s is %d bytes, not 76", w.name, len(blob))
		}
		t := binary.BigEndian.Uint64(blob[4:12])
		msg := fmt.Sprintf("cosignature/v1\ntime %d\n%s", t, text)
		if t > 1<<63-1 || !ed25519.Verify(w.key, []byte(msg), blob[12:]) {
			fail("the cosignature of %s does not verify", w.name)
		}
		return t, true
	}
	return 0, false
}

type policy struct {
	witnesses map[string]cosigner
	order     []string
	groups    map[string][]string
	threshold map[string]int
	quorum    string
}

// readPolicy reads the tlog-policy lines this project writes: witness, group, quorum (log
// lines are checked by the caller through the log key).
func readPolicy(path string) policy {
	b, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	p := policy{witnesses: map[string]cosigner{}, groups: map[string][]string{}, threshold: map[string]int{}}
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		defined := func(n string) bool { _, w := p.witnesses[n]; _, g := p.groups[n]; return w || g }
		switch {
		case f[0] == "log":
		case f[0] == "witness" && len(f) >= 3 && !defined(f[1]):
			p.witnesses[f[1]] = parseCosignerKey(f[2])
			p.order = append(p.order, f[1])
		case f[0] == "group" && len(f) >= 4 && !defined(f[1]):
			for _, m := range f[3:] {
				if !defined(m) {
					fail("%s:%d: %q is not defined", path, i+1, m)
				}
			}
			k := len(f) - 3
			if f[2] == "any" {
				k = 1
			} else if f[2] != "all" {
				if k, err = strconv.Atoi(f[2]); err != nil || k < 1 || k > len(f)-3 {
					fail("%s:%d: bad threshold", path, i+1)
				}
			}
			p.groups[f[1]], p.threshold[f[1]] = f[3:], k
		case f[0] == "quorum" && len(f) == 2 && p.quorum == "" && (f[1] == "none" || defined(f[1])):
			p.quorum = f[1]
		default:
			fail("%s:%d: not a policy line this peer reads: %q", path, i+1, line)
		}
	}
	if p.quorum == "" {
		fail("%s: no quorum", path)
	}
	return p
}

func (p policy) holds(name string, cosigned map[string]bool) bool {
	if name == "none" {
		return true
	}
	members, ok := p.groups[name]
	if !ok {
		return cosigned[name]
	}
	n := 0
	for _, m := range members {
		if p.holds(m, cosigned) {
			n++
		}
	}
	return n >= p.threshold[name]
}

func checkCosigned(l *logFile, v note.Verifier, policyPath, cosignedPath string) {
	msg, err := os.ReadFile(cosignedPath)
	if err != nil {
		fail("%v", err)
	}
	size, root := openCheckpoint(msg, v)
	found := false
	for _, h := range l.heads {
		found = found || (h.size == size && h.root == root)
	}
	if !found {
		fail("the cosigned checkpoint (size %d) is not a head of this log", size)
	}
	text := string(msg[:bytes.LastIndex(msg, []byte("\n\n"))+1])
	sigLines := strings.Split(strings.TrimSuffix(string(msg[len(text)+1:]), "\n"), "\n")
	p := readPolicy(policyPath)
	cosigned := map[string]bool{}
	names := []string{}
	for _, name := range p.order {
		if t, ok := cosignedBy(text, sigLines, p.witnesses[name]); ok {
			cosigned[name] = true
			names = append(names, fmt.Sprintf("%s (%s)", name, time.Unix(int64(t), 0).UTC().Format(time.RFC3339)))
		}
	}
	if !p.holds(p.quorum, cosigned) {
		fail("the checkpoint of size %d is cosigned by %v: not the quorum %s", size, names, p.quorum)
	}
	fmt.Printf("OK: the checkpoint of size %d is cosigned by %s: quorum %s met (checked with crypto/ed25519)\n",
		size, strings.Join(names, ", "), p.quorum)
}

func submit(l *logFile, v note.Verifier, key []byte, url, witnessVkey string) {
	w := parseCosignerKey(witnessVkey)
	last := l.heads[len(l.heads)-1]
	cp := headNote(v, last, key)
	text := string(cp[:bytes.Index(cp, []byte("\n\n"))+1])
	old := int64(0)
	for try := 0; try < 2; try++ {
		var body bytes.Buffer
		fmt.Fprintf(&body, "old %d\n", old)
		if old > 0 && old < last.size {
			proof, err := tlog.ProveTree(last.size, old, l)
			if err != nil {
				fail("tlog.ProveTree: %v", err)
			}
			for _, h := range proof {
				body.WriteString(base64.StdEncoding.EncodeToString(h[:]) + "\n")
			}
		}
		body.WriteString("\n")
		body.Write(cp)
		resp, err := http.Post(url+"/add-checkpoint", "text/plain", &body)
		if err != nil {
			fail("POST: %v", err)
		}
		answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if resp.StatusCode == 409 && resp.Header.Get("Content-Type") == "text/x.tlog.size" {
			if old, err = strconv.ParseInt(strings.TrimSuffix(string(answer), "\n"), 10, 64); err != nil {
				fail("409 without a size: %q", answer)
			}
			continue
		}
		if resp.StatusCode != 200 {
			fail("the witness answered %d: %s", resp.StatusCode, strings.TrimSpace(string(answer)))
		}
		lines := strings.Split(strings.TrimSuffix(string(answer), "\n"), "\n")
		if _, ok := cosignedBy(text, lines, w); !ok {
			fail("the answer has no cosignature by %s", w.name)
		}
		fmt.Print(string(answer))
		return
	}
	fail("the witness's size kept changing")
}
