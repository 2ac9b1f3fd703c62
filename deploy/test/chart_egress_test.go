package deploytest

// The way to the vendor through an egress proxy: config.upstream.proxy_url
// passes through, and the proxy's credentials come from a Secret the chart
// mounts as a file (proxyAuth), like the API key.

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestChartProxyCredentials: with proxyAuth.existingSecret the Secret's key
// is mounted read-only as a directory (no subPath: a rotated Secret reaches
// the running pod, and faxgate re-reads the file), config.upstream.proxy_auth_file
// points at it in the live file and in the candidate, and the proxy URL is
// config's; without it nothing is mounted and no file is named. Only the
// generated ConfigMap is checksummed: the Secret's name is not, its key is
// (the file's path is in the config).
func TestChartProxyCredentials(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		set          []string
		secret, key  string // "": no proxy credentials
		proxyURL     string
	}{
		{"none", "default", nil, "", "", ""},
		{"a proxy without credentials", "default", []string{"config.upstream.proxy_url=http://proxy.egress:3128"}, "", "", "http://proxy.egress:3128"},
		{"everything", "everything", nil, "egress-proxy", "proxy-auth", "http://egress-proxy.egress.svc:3128"},
		{"another key", "everything", []string{"proxyAuth.key=credentials"}, "egress-proxy", "credentials", "http://egress-proxy.egress.svc:3128"},
		{"through HTTPS_PROXY", "default", []string{"config.upstream.proxy_url=env", "proxyAuth.existingSecret=corp-proxy"}, "corp-proxy", "proxy-auth", "env"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rendered := mustRender(t, "testdata/values/"+tc.values+".yaml", tc.set...)
			wantFile := ""
			if tc.secret != "" {
				wantFile = "/etc/faxgate/proxy-auth/" + tc.key
			}
			live, cand := renderedFiles(t, rendered)
			for file, cfg := range map[string]map[string]any{"faxgate.yaml": live, "shadow.yaml": cand} {
				if cfg == nil {
					continue
				}
				if got, _ := at(cfg, "upstream.proxy_auth_file").(string); got != wantFile {
					t.Errorf("%s: upstream.proxy_auth_file = %q, want %q", file, got, wantFile)
				}
				if got, _ := at(cfg, "upstream.proxy_url").(string); got != tc.proxyURL {
					t.Errorf("%s: upstream.proxy_url = %q, want %q", file, got, tc.proxyURL)
				}
			}
			// Both files pass faxgate check with the credentials in place.
			checkRendered(t, rendered)

			ps := deployment(t, rendered).Spec.Template.Spec
			var vol *corev1.Volume
			for i := range ps.Volumes {
				if ps.Volumes[i].Name == "proxy-auth" {
					vol = &ps.Volumes[i]
				}
			}
			var mount *corev1.VolumeMount
			for i, m := range ps.Containers[0].VolumeMounts {
				if m.Name == "proxy-auth" {
					mount = &ps.Containers[0].VolumeMounts[i]
				}
			}
			if tc.secret == "" {
				if vol != nil || mount != nil {
					t.Errorf("proxy-auth volume %+v, mount %+v without proxyAuth", vol, mount)
				}
				return
			}
			if vol == nil || vol.Secret == nil || vol.Secret.SecretName != tc.secret || len(vol.Secret.Items) != 1 ||
				vol.Secret.Items[0].Key != tc.key || vol.Secret.Items[0].Path != tc.key ||
				vol.Secret.DefaultMode == nil || *vol.Secret.DefaultMode != 0o440 {
				t.Errorf("proxy-auth volume %+v, want Secret %s key %s as file %s, mode 0440", vol, tc.secret, tc.key, tc.key)
			}
			if mount == nil || mount.MountPath != "/etc/faxgate/proxy-auth" || !mount.ReadOnly || mount.SubPath != "" {
				t.Errorf("proxy-auth mount %+v, want /etc/faxgate/proxy-auth read-only, without subPath", mount)
			}
		})
	}

	sum := func(set ...string) string {
		return deployment(t, mustRender(t, "testdata/values/everything.yaml", set...)).Spec.Template.Annotations["checksum/config"]
	}
	base := sum()
	if sum("proxyAuth.existingSecret=rotated-proxy") != base {
		t.Error("the checksum covers the proxy Secret's name, not only generated objects")
	}
	if sum("proxyAuth.key=credentials") == base {
		t.Error("another proxyAuth.key leaves the checksum, though the config names another file")
	}
}
