package deploytest

// The chart's Redis values (docs/deployment.md, Redis in production): the
// data nodes' and the sentinels' passwords from Secrets, and the schema's
// refusals of a topology faxgate check refuses.

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/faxgate/faxgate/internal/config"
)

// TestChartSentinelPasswords: with redisPassword and redisSentinelPassword,
// the pod gets both passwords from their Secrets as environment variables,
// and the config names those variables.
func TestChartSentinelPasswords(t *testing.T) {
	out := mustRender(t, "testdata/values/sentinel.yaml")
	var m corev1.ConfigMap
	if err := find(objects(t, out), "ConfigMap").strict(&m); err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse([]byte(m.Data["faxgate.yaml"]), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Redis; r.EffectiveMode() != config.RedisModeSentinel || r.MasterName != "mymaster" ||
		r.PasswordEnv != "FAXGATE_REDIS_PASSWORD" || r.SentinelPasswordEnv != "FAXGATE_REDIS_SENTINEL_PASSWORD" {
		t.Errorf("rendered redis section %+v", r)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range deployment(t, out).Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	for _, name := range []string{"FAXGATE_REDIS_PASSWORD", "FAXGATE_REDIS_SENTINEL_PASSWORD"} {
		e, ok := env[name]
		if !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
			e.ValueFrom.SecretKeyRef.Name != "redis" || e.ValueFrom.SecretKeyRef.Key != "redis-password" {
			t.Errorf("%s: %+v, want it from Secret redis, key redis-password", name, e)
		}
	}
	// Without redisSentinelPassword neither the variable nor the key.
	out = mustRender(t, "testdata/values/replicas-redis.yaml")
	if strings.Contains(out, "FAXGATE_REDIS_SENTINEL_PASSWORD") || strings.Contains(out, "sentinel_password_env") {
		t.Errorf("a sentinel password appears without redisSentinelPassword")
	}
}

// TestChartRefusesBadRedisTopology: what the schema can say of redis.mode.
func TestChartRefusesBadRedisTopology(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"an unknown mode", []string{"config.redis.mode=replicated"},
			"at '/config/redis/mode': value must be one of 'auto', 'single', 'cluster', 'sentinel'"},
		{"sentinel without master_name", []string{"config.redis.mode=sentinel"},
			"at '/config/redis': missing property 'master_name'"},
		{"the sentinels' password variable", []string{"config.redis.sentinel_password_env=PW"},
			"remove redis.sentinel_password_env from config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, "testdata/values/default.yaml", tc.set...)
			if err == nil {
				t.Fatalf("rendered:\n%.400s", out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("message %q lacks %q", out, tc.want)
			}
		})
	}
}
