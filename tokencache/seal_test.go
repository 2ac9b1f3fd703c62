package tokencache

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"testing"
	"time"
)

// sealRecord seals rec as seal would, for records seal itself never makes.
func sealRecord(t testing.TB, s *sealer, tok *Token, rec []byte, keyName string) []byte {
	t.Helper()
	out := make([]byte, idLen+nonceLen)
	copy(out, s.id(tok))
	if _, err := rand.Read(out[idLen:]); err != nil {
		t.Fatal(err)
	}
	return s.aead.Seal(out, out[idLen:], rec, []byte(keyName))
}

func record(version, flags byte, issued, expiry time.Time, v string) []byte {
	rec := make([]byte, recordHeader)
	rec[0], rec[1] = version, flags
	binary.BigEndian.PutUint64(rec[2:], uint64(issued.UnixNano()))
	binary.BigEndian.PutUint64(rec[10:], uint64(expiry.UnixNano()))
	return append(rec, v...)
}

func TestOpenRejectsRecordsSealNeverWrites(t *testing.T) {
	s, err := newSealer(NewSecret("seal-test-key"))
	if err != nil {
		t.Fatal(err)
	}
	const key = "faxgate:{x}:token"
	now := time.Unix(1_800_000_000, 0)
	tok := NewToken(NewSecret("tok-value"), now, time.Hour, false)

	// The helper itself produces openable values: the cases below fail for
	// the reason they name, not because of the helper.
	if _, err := s.open(sealRecord(t, s, tok, record(recordVersion, 0, now, now.Add(time.Hour), "tok-value"), key), key); err != nil {
		t.Fatalf("a well-formed record does not open: %v", err)
	}
	tests := []struct {
		name string
		rec  []byte
	}{
		{"future version", record(recordVersion+1, 0, now, now.Add(time.Hour), "tok-value")},
		{"unknown flag", record(recordVersion, 0x80, now, now.Add(time.Hour), "tok-value")},
		{"expiry before issue", record(recordVersion, 0, now, now.Add(-time.Hour), "tok-value")},
		{"no token", record(recordVersion, 0, now, now.Add(time.Hour), "")},
		{"header only, short", record(recordVersion, 0, now, now.Add(time.Hour), "")[:recordHeader-1]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := s.open(sealRecord(t, s, tok, tt.rec, key), key); err == nil {
				t.Errorf("open = %v, want errUnreadable", got)
			}
		})
	}
}

func TestSealIsRandomised(t *testing.T) {
	s, err := newSealer(NewSecret("seal-test-key"))
	if err != nil {
		t.Fatal(err)
	}
	tok := NewToken(NewSecret("tok-value"), time.Now(), time.Hour, true)
	a, err := s.seal(tok, "k")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.seal(tok, "k")
	if bytes.Equal(a, b) {
		t.Errorf("sealing the same token twice gave the same bytes: the nonce is not random")
	}
	if !bytes.Equal(a[:idLen], b[:idLen]) {
		t.Errorf("the id of one token differs between seals; DeleteIf relies on it being stable")
	}
	got, err := s.open(a, "k")
	if err != nil || !got.Value.Equal(tok.Value) || !got.By401 {
		t.Errorf("open(seal(tok)) = %v, %v", got, err)
	}
}

// FuzzOpen: whatever Redis holds, open returns a token or errUnreadable,
// never panics, and a token it returns matches the id in front of it.
func FuzzOpen(f *testing.F) {
	s, err := newSealer(NewSecret("fuzz-key"))
	if err != nil {
		f.Fatal(err)
	}
	const key = "faxgate:{fuzz}:token"
	good, err := s.seal(NewToken(NewSecret("tok"), time.Unix(1_800_000_000, 0), time.Hour, false), key)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)                        // a real value
	f.Add(good[:len(good)-1])          // truncated tag
	f.Add([]byte{})                    // empty
	f.Add([]byte(`{"token":"x"}`))     // what an unsealed store would hold
	f.Add(bytes.Repeat([]byte{0}, 80)) // zeros of a plausible length
	f.Fuzz(func(t *testing.T, val []byte) {
		tok, err := s.open(val, key)
		if err != nil {
			return
		}
		if s.id(tok) != string(val[:idLen]) {
			t.Fatalf("opened a value whose id does not match its token")
		}
	})
}
