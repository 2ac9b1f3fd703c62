package servertls

import (
	"crypto/sha256"

	"github.com/faxgate/faxgate/internal/base/filedigest"
)

// digests hashes the bytes read, as filedigest.Of hashes a file, so the
// poller compares like with like.
func digests(cert, key []byte) [2]filedigest.Digest {
	return [2]filedigest.Digest{sha256.Sum256(cert), sha256.Sum256(key)}
}
