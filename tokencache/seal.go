package tokencache

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"time"
)

// What the shared token is sealed with. Every key is derived from the API
// secret with HKDF-SHA256 under its own info string, so no derived value
// reveals another, and none is the secret or a plain hash of it.
const (
	hkdfSalt        = "faxgate"
	infoFingerprint = "faxgate token-cache fingerprint v1"
	infoID          = "faxgate token-cache id v1"
	infoAEAD        = "faxgate token-cache aead v1"

	fingerprintBytes = 8  // 16 hex characters in key names
	idBytes          = 16 // 32 hex characters at the start of the value
	idLen            = 2 * idBytes
	nonceLen         = 12

	recordVersion = 1
	recordHeader  = 1 + 1 + 8 + 8 // version, flags, issued, expiry
	flagBy401     = 1
)

// sealer holds what is derived from one API secret. It lives only in memory.
type sealer struct {
	secret Secret // to recognise the same secret on the next call without deriving again
	fp     string // hex fingerprint: names the Redis keys of this secret
	mac    []byte // HMAC key of token ids
	aead   cipher.AEAD
}

// newSealer derives every key of secret.
func newSealer(secret Secret) (*sealer, error) {
	ikm := []byte(secret.Reveal())
	fp, err := hkdf.Key(sha256.New, ikm, []byte(hkdfSalt), infoFingerprint, fingerprintBytes)
	if err != nil {
		return nil, err
	}
	mac, err := hkdf.Key(sha256.New, ikm, []byte(hkdfSalt), infoID, sha256.Size)
	if err != nil {
		return nil, err
	}
	key, err := hkdf.Key(sha256.New, ikm, []byte(hkdfSalt), infoAEAD, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key) // 32 bytes: AES-256
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{secret: secret, fp: hex.EncodeToString(fp), mac: mac, aead: aead}, nil
}

// id is the token's non-secret identity: who holds only Redis's content
// cannot compute it for a guessed token, yet every replica with the same
// API secret gets the same id for the same token.
func (s *sealer) id(tok *Token) string {
	h := hmac.New(sha256.New, s.mac)
	h.Write([]byte(tok.Value.Reveal()))
	return hex.EncodeToString(h.Sum(nil)[:idBytes])
}

// seal returns id || nonce || AES-256-GCM(record), bound to the Redis key
// name by the additional data so a value copied to another key does not open.
func (s *sealer) seal(tok *Token, keyName string) ([]byte, error) {
	v := tok.Value.Reveal()
	rec := make([]byte, recordHeader, recordHeader+len(v))
	rec[0] = recordVersion
	if tok.By401 {
		rec[1] = flagBy401
	}
	binary.BigEndian.PutUint64(rec[2:], uint64(tok.Issued.UnixNano()))
	binary.BigEndian.PutUint64(rec[10:], uint64(tok.Expiry.UnixNano()))
	rec = append(rec, v...)

	out := make([]byte, idLen+nonceLen, idLen+nonceLen+len(rec)+s.aead.Overhead())
	copy(out, s.id(tok))
	if _, err := rand.Read(out[idLen:]); err != nil {
		return nil, err
	}
	out = s.aead.Seal(out, out[idLen:], rec, []byte(keyName))
	clear(rec)
	return out, nil
}

// errUnreadable is any value that is not a token sealed by this secret for
// this key: another secret's, tampered, truncated, or of another version.
var errUnreadable = errors.New("shared token cannot be opened")

// open reverses seal. Any failure is errUnreadable, without detail: the
// caller treats the value as absent.
func (s *sealer) open(val []byte, keyName string) (*Token, error) {
	if len(val) < idLen+nonceLen+s.aead.Overhead() {
		return nil, errUnreadable
	}
	id, nonce, ct := val[:idLen], val[idLen:idLen+nonceLen], val[idLen+nonceLen:]
	rec, err := s.aead.Open(nil, nonce, ct, []byte(keyName))
	if err != nil || len(rec) <= recordHeader || rec[0] != recordVersion || rec[1]&^flagBy401 != 0 {
		return nil, errUnreadable
	}
	defer clear(rec)
	issued := time.Unix(0, int64(binary.BigEndian.Uint64(rec[2:])))
	expiry := time.Unix(0, int64(binary.BigEndian.Uint64(rec[10:])))
	if !expiry.After(issued) {
		return nil, errUnreadable
	}
	tok := NewToken(NewSecret(string(rec[recordHeader:])), issued, expiry.Sub(issued), rec[1]&flagBy401 != 0)
	// The id is outside the ciphertext; a value whose id does not match its
	// token would defeat DeleteIf, so it is not a valid value.
	if !hmac.Equal([]byte(s.id(tok)), id) {
		return nil, errUnreadable
	}
	return tok, nil
}
