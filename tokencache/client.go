package tokencache

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/faxgate/faxgate/internal/base/clock"
	"github.com/faxgate/faxgate/internal/config"
)

// Fetcher obtains a new token from the upstream token endpoint.
type Fetcher interface {
	Fetch(ctx context.Context) (*Token, error)
}

// KeyFunc returns the API secret. It is called for every renewal, so a key
// file rotated on disk is used from the next renewal on.
type KeyFunc func() (Secret, error)

// FileKey reads the API secret from path on every call (surrounding white
// space trimmed), which is how key rotation on disk takes effect.
func FileKey(path string) KeyFunc {
	return func() (Secret, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			// The error names the path only; never the file's content.
			return Secret{}, fmt.Errorf("reading api key file: %w", err)
		}
		k := strings.TrimSpace(string(b))
		if k == "" {
			return Secret{}, fmt.Errorf("api key file %s is empty", path)
		}
		return NewSecret(k), nil
	}
}

// StaticKey returns a KeyFunc for a key read once (from the environment, by main).
func StaticKey(s Secret) KeyFunc {
	return func() (Secret, error) {
		if s.IsZero() {
			return Secret{}, errors.New("api key is empty")
		}
		return s, nil
	}
}

// DefaultLifetime is used when the token response carries no usable
// expires_in: the lifetime of the vendor's Customer API v1 tokens
// (config.TokenLifetime).
const DefaultLifetime = config.TokenLifetime

// maxAuthResponse bounds how much of the token endpoint's answer is read.
const maxAuthResponse = 64 << 10

// Client calls POST {base_url}/v1/auth.
type Client struct {
	url   string
	http  *http.Client
	key   KeyFunc
	clock clock.Clock
}

var _ Fetcher = (*Client)(nil)

// NewClient builds a token client for baseURL (which may carry a path prefix).
// The client follows no redirect: the key travels in the request body, so it
// is only ever sent to {base_url}/v1/auth itself.
func NewClient(baseURL string, rt http.RoundTripper, timeout time.Duration, key KeyFunc, clock clock.Clock) *Client {
	return &Client{
		url: strings.TrimSuffix(baseURL, "/") + "/v1/auth",
		http: &http.Client{
			Transport: rt,
			Timeout:   timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
		key:   key,
		clock: clock,
	}
}

type authResponse struct {
	Status *int `json:"status"`
	Data   *struct {
		AccessToken string `json:"access_token"`
		TokenType   string `json:"token_type"`
		ExpiresIn   int64  `json:"expires_in"`
	} `json:"data"`
}

// Fetch exchanges the API secret for a token. It returns ErrInvalidKey when
// the upstream answers 401. Errors never carry the key, the token or the body.
func (c *Client) Fetch(ctx context.Context) (*Token, error) {
	key, err := c.key()
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(struct {
		Key string `json:"api_secret_key"`
	}{key.Reveal()})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, errors.New("building token request failed")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	issued := c.clock.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("token request: %w", scrubURLError(err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAuthResponse+1))
	if err != nil {
		return nil, fmt.Errorf("token response: %w", scrubURLError(err))
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, ErrInvalidKey
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return nil, fmt.Errorf("token endpoint answered HTTP %d", resp.StatusCode)
	case len(raw) > maxAuthResponse:
		return nil, errors.New("token response too large")
	}
	var ar authResponse
	if err := json.Unmarshal(raw, &ar); err != nil {
		return nil, errors.New("token response is not valid JSON")
	}
	if ar.Status != nil && *ar.Status != 1 {
		return nil, fmt.Errorf("token endpoint answered status %d", *ar.Status)
	}
	if ar.Data == nil || ar.Data.AccessToken == "" {
		return nil, errors.New("token response has no data.access_token")
	}
	if !headerSafe(ar.Data.AccessToken) {
		return nil, errors.New("token response's access_token is not a valid header value")
	}
	if ar.Data.TokenType != "" && !strings.EqualFold(ar.Data.TokenType, "Bearer") {
		return nil, fmt.Errorf("token endpoint issued token type %q, want Bearer", truncate(ar.Data.TokenType, 20))
	}
	lifetime := DefaultLifetime
	if s := ar.Data.ExpiresIn; s > 0 && s <= 366*24*3600 {
		lifetime = time.Duration(s) * time.Second
	}
	return NewToken(NewSecret(ar.Data.AccessToken), issued, lifetime, false), nil
}

// headerSafe accepts the visible ASCII a Bearer token (RFC 6750 b64token) can hold.
func headerSafe(s string) bool {
	if len(s) > 8192 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// scrubURLError drops the URL from a *url.Error: the base URL is not secret,
// but keeping errors to their cause keeps log lines short and uniform.
func scrubURLError(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}
