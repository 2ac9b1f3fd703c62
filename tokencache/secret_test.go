package tokencache_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/faxgate/faxgate/tokencache"
)

func TestSecretNeverPrintsItself(t *testing.T) {
	const v = "sk_live_SUPERSECRET"
	s := tokencache.NewSecret(v)
	holder := struct {
		Key tokencache.Secret
		Ptr *tokencache.Secret
	}{s, &s}
	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T %v"} {
		outs = append(outs, fmt.Sprintf(verb, s), fmt.Sprintf(verb, holder), fmt.Sprintf(verb, &s))
	}
	outs = append(outs, fmt.Sprint(s), fmt.Sprintln(holder), s.String())
	j, err := json.Marshal(holder)
	if err != nil {
		t.Fatal(err)
	}
	outs = append(outs, string(j))
	var buf bytes.Buffer
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	log := zap.New(zapcore.NewCore(enc, zapcore.AddSync(&buf), zapcore.DebugLevel))
	log.Info("x", zap.Any("any", s), zap.Any("holder", holder), zap.Stringer("str", s), zap.Reflect("refl", holder))
	outs = append(outs, buf.String())
	for _, o := range outs {
		if strings.Contains(o, v) || strings.Contains(o, fmt.Sprintf("%x", v)) {
			t.Fatalf("secret printed: %s", o)
		}
	}
	if !strings.Contains(buf.String(), "[redacted]") {
		t.Fatalf("zap output lacks [redacted]: %s", buf.String())
	}
	if s.Reveal() != v {
		t.Fatal("Reveal lost the value")
	}
	if !s.Equal(tokencache.NewSecret(v)) || s.Equal(tokencache.NewSecret(v+"x")) {
		t.Fatal("Equal is wrong")
	}
}
