package redisconn

import (
	"errors"
	"strings"
)

// ScrubError cuts the arguments Redis echoes in some replies ("unknown
// command 'EVALSHA', with args beginning with: ..." when a command is
// renamed or disabled), which would put a stored value (a sealed token, a
// certificate) into a log line.
func ScrubError(err error) error {
	const echo = ", with args beginning with"
	if msg := err.Error(); strings.Contains(msg, echo) {
		return errors.New(msg[:strings.Index(msg, echo)])
	}
	return err
}
