package deploytest

// The chart's values: what the schema refuses, with the message an operator
// sees, and the NetworkPolicy they configure.

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TestChartNetworkPolicy: callers reach only the proxy port and monitoring
// only the admin port; egress rules are passed through.
func TestChartNetworkPolicy(t *testing.T) {
	objs := objects(t, mustRender(t, "testdata/values/everything.yaml"))
	var np networkingv1.NetworkPolicy
	if err := find(objs, "NetworkPolicy").strict(&np); err != nil {
		t.Fatal(err)
	}
	if len(np.Spec.Ingress) != 2 {
		t.Fatalf("ingress rules %+v", np.Spec.Ingress)
	}
	callers, monitoring := np.Spec.Ingress[0], np.Spec.Ingress[1]
	if len(callers.Ports) != 1 || callers.Ports[0].Port.String() != "proxy" ||
		callers.From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "intake" {
		t.Errorf("callers rule %+v", callers)
	}
	if len(monitoring.Ports) != 1 || monitoring.Ports[0].Port.String() != "admin" || len(monitoring.From) != 2 ||
		monitoring.From[1].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" {
		t.Errorf("monitoring rule %+v", monitoring)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || len(np.Spec.Egress) != 2 {
		t.Errorf("egress %v %+v", np.Spec.PolicyTypes, np.Spec.Egress)
	}
}

// TestChartHelmTestPassesTheNetworkPolicy is the regression test for helm
// test failing under networkPolicy.egress: the test pod carried the
// gateway's selector labels, so the egress rules (DNS, upstream, Redis)
// applied to it and its GET of /readyz never left. Now no selector of the
// gateway's takes the test pod in, the ingress rule for the admin port lets
// it in, and it asks the metrics Service on the admin port.
func TestChartHelmTestPassesTheNetworkPolicy(t *testing.T) {
	objs := objects(t, mustRender(t, "testdata/values/everything.yaml"))
	var pod corev1.Pod
	decodeNamed(t, objs, "Pod", "faxgate-test-readyz", &pod)
	podLabels := labels.Set(pod.Labels)
	var np networkingv1.NetworkPolicy
	decodeNamed(t, objs, "NetworkPolicy", "faxgate", &np)
	var svc, metrics corev1.Service
	decodeNamed(t, objs, "Service", "faxgate", &svc)
	decodeNamed(t, objs, "Service", "faxgate-metrics", &metrics)
	var pdb policyv1.PodDisruptionBudget
	decodeNamed(t, objs, "PodDisruptionBudget", "faxgate", &pdb)
	d := deployment(t, mustRender(t, "testdata/values/everything.yaml"))

	for name, sel := range map[string]*metav1.LabelSelector{
		"NetworkPolicy podSelector": &np.Spec.PodSelector,
		"Deployment selector":       d.Spec.Selector,
		"PDB selector":              pdb.Spec.Selector,
		"Service selector":          {MatchLabels: svc.Spec.Selector},
		"metrics Service selector":  {MatchLabels: metrics.Spec.Selector},
	} {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			t.Fatal(err)
		}
		if s.Matches(podLabels) {
			t.Errorf("%s %v takes in the test pod %v", name, s, podLabels)
		}
	}
	// The rule that lets the test pod in must be one on the admin port.
	admitted := false
	for _, rule := range np.Spec.Ingress {
		for _, peer := range rule.From {
			if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil {
				continue
			}
			s, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
			if err != nil {
				t.Fatal(err)
			}
			if s.Matches(podLabels) {
				admitted = len(rule.Ports) == 1 && rule.Ports[0].Port.String() == "admin"
			}
		}
	}
	if !admitted {
		t.Errorf("no ingress rule on the admin port admits the test pod %v: %+v", podLabels, np.Spec.Ingress)
	}
	// The gateway's own image (faxgate probe), with the release's pull
	// secrets: no other image to pull into a cluster that allows only its
	// own registry.
	c := pod.Spec.Containers[0]
	if args := strings.Join(c.Args, " "); len(c.Command) != 0 || args != "probe --timeout 5s http://faxgate-metrics:9090/readyz" {
		t.Errorf("test pod command %q args %q, want faxgate probe of /readyz on the metrics Service's admin port", c.Command, args)
	}
	if c.Image != d.Spec.Template.Spec.Containers[0].Image || c.ImagePullPolicy != d.Spec.Template.Spec.Containers[0].ImagePullPolicy {
		t.Errorf("test pod image %q (%s), want the gateway's %q", c.Image, c.ImagePullPolicy, d.Spec.Template.Spec.Containers[0].Image)
	}
	if len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("test pod pull secrets %v, want the release's regcred", pod.Spec.ImagePullSecrets)
	}
}

// TestChartRefusesBadValues: the schema refuses mistakes with a message
// naming the value.
func TestChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		set          []string
		want         string
	}{
		{"no API key secret", "", []string{"config.upstream.base_url=https://api.example.com"},
			"at '/apiKey': missing property 'existingSecret'"},
		{"no base_url", "", []string{"apiKey.existingSecret=k"},
			"at '/config/upstream': missing property 'base_url'"},
		{"several replicas on the memory store", "testdata/values/default.yaml", []string{"replicaCount=3"},
			"at '/config/token/store': value must be 'redis'"},
		{"several replicas limiting each on its own", "testdata/values/default.yaml", []string{"replicaCount=3", "config.token.store=redis"},
			"at '/config/rate_limit/backend': value must be 'redis'"},
		{"an autoscaler on the memory store", "testdata/values/default.yaml", []string{"autoscaling.enabled=true", "config.rate_limit.backend=redis"},
			"at '/config/token/store': value must be 'redis'"},
		{"an autoscaler limiting each pod on its own", "testdata/values/default.yaml", []string{"autoscaling.enabled=true", "config.token.store=redis"},
			"at '/config/rate_limit/backend': value must be 'redis'"},
		{"an unknown key of a later section", "testdata/values/default.yaml", []string{"config.tracing.sample_rate=0.1"},
			"at '/config/tracing': additional properties 'sample_rate' not allowed"},
		{"an unknown key in a list", "testdata/values/default.yaml", []string{"config.callers.list[0].name=a", "config.callers.list[0].alow[0]=x"},
			"at '/config/callers/list/0': additional properties 'alow' not allowed"},
		{"a single value where a section belongs", "testdata/values/default.yaml", []string{"config.tracing=on"},
			"at '/config/tracing': got string, want"},
		{"a threshold for an alert without one", "testdata/values/default.yaml",
			[]string{"prometheusRule.enabled=true", "prometheusRule.alerts.FaxgateAbsent.threshold=1"},
			"prometheusRule.alerts.FaxgateAbsent.threshold: the alert has no threshold"},
		{"a negative threshold", "testdata/values/default.yaml", []string{"prometheusRule.alerts.FaxgateDown.threshold=-1"},
			"at '/prometheusRule/alerts/FaxgateDown/threshold'"},
		{"a typo", "testdata/values/default.yaml", []string{"replicaCont=2"},
			"additional properties 'replicaCont' not allowed"},
		{"a typo in a toggle", "testdata/values/default.yaml", []string{"serviceMonitor.enable=true"},
			"at '/serviceMonitor': additional properties 'enable' not allowed"},
		{"a wrong type", "testdata/values/default.yaml", []string{"service.port=http"},
			"at '/service/port': got string, want integer"},
		{"an unknown config section", "testdata/values/default.yaml", []string{"config.ratelimit.backend=redis"},
			"at '/config': additional properties 'ratelimit' not allowed"},
		{"a key the chart owns", "testdata/values/default.yaml", []string{"config.upstream.api_key_env=KEY"},
			"at '/config/upstream/api_key_env': value must be 'set by the chart from apiKey: remove upstream.api_key_env from config'"},
		{"the listen address", "testdata/values/default.yaml", []string{"config.admin.listen=127.0.0.1:9090"},
			"remove admin.listen from config"},
		{"proxy credentials without a proxy", "testdata/values/default.yaml", []string{"proxyAuth.existingSecret=corp-proxy"},
			"at '/config/upstream': missing property 'proxy_url'"},
		{"proxy credentials named in config", "testdata/values/default.yaml", []string{"config.upstream.proxy_auth_file=/etc/proxy"},
			"at '/config/upstream/proxy_auth_file': value must be 'set by the chart from proxyAuth: remove upstream.proxy_auth_file from config'"},
		{"a candidate file named in config", "testdata/values/default.yaml", []string{"config.shadow.config_file=candidate.yaml"},
			"at '/config/shadow/config_file': value must be 'set by the chart from shadowConfig: remove shadow.config_file from config'"},
		{"a candidate section faxgate does not read", "testdata/values/default.yaml", []string{"shadowConfig.upstream.timeout=5s"},
			"at '/shadowConfig/upstream': value must be 'shadowConfig takes only callers, policy, routes, rate_limit and upstream_budget, the sections faxgate reads from a candidate: remove upstream from shadowConfig'"},
		{"an unknown key in a candidate", "testdata/values/default.yaml", []string{"shadowConfig.rate_limit.defualt.rps=5"},
			"at '/shadowConfig/rate_limit': additional properties 'defualt' not allowed"},
		{"a candidate of several replicas limiting each on its own", "testdata/values/replicas-redis.yaml", []string{"shadowConfig.rate_limit.backend=local"},
			"at '/shadowConfig/rate_limit/backend': value must be 'redis'"},
		{"a candidate under an autoscaler limiting each pod on its own", "testdata/values/hpa-redis.yaml", []string{"shadowConfig.rate_limit.backend=local"},
			"at '/shadowConfig/rate_limit/backend': value must be 'redis'"},
		{"mTLS without TLS", "testdata/values/default.yaml", []string{"tls.clientCASecret=ca"},
			"at '/tls/existingSecret': minLength: got 0, want 1"},
		{"an override of an alert that does not exist", "testdata/values/default.yaml",
			[]string{"prometheusRule.enabled=true", "prometheusRule.alerts.FaxgateDwn.enabled=false"},
			"prometheusRule.alerts.FaxgateDwn: no such alert (the alerts: FaxgateAPIKeyRejected, FaxgateAbsent,"},
		{"an alert severity that pages nobody", "testdata/values/default.yaml", []string{"prometheusRule.alerts.FaxgateDown.severity=page"},
			"at '/prometheusRule/alerts/FaxgateDown/severity': value must be one of 'critical', 'warning', 'info'"},
		{"an alert for: that is no duration", "testdata/values/default.yaml", []string{"prometheusRule.alerts.FaxgateDown.for=5 minutes"},
			"at '/prometheusRule/alerts/FaxgateDown/for'"},
		{"a typo in an alert override", "testdata/values/default.yaml", []string{"prometheusRule.alerts.FaxgateDown.enable=false"},
			"at '/prometheusRule/alerts/FaxgateDown': additional properties 'enable' not allowed"},
		{"a NetworkPolicy with no callers", "testdata/values/default.yaml", []string{"networkPolicy.enabled=true"},
			networkPolicyNoCallers},
		{"a NetworkPolicy with no callers but monitoring", "testdata/values/default.yaml",
			[]string{"networkPolicy.enabled=true", "networkPolicy.monitoring[0].podSelector.matchLabels.app=prometheus"},
			networkPolicyNoCallers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, tc.values, tc.set...)
			if err == nil {
				t.Fatalf("rendered:\n%.400s", out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("message %q lacks %q", out, tc.want)
			}
		})
	}
}

// networkPolicyNoCallers is what helm prints for networkPolicy.enabled
// with an empty networkPolicy.callers.
const networkPolicyNoCallers = "at '/networkPolicy/callers': value must be 'networkPolicy.enabled with no callers would let no caller reach the proxy port: list the peers allowed in networkPolicy.callers'"

// TestChartLintRefusesNetworkPolicyWithoutCallers: helm lint (not only
// install and template) says why, and the NetworkPolicy with callers, or
// none at all, passes.
func TestChartLintRefusesNetworkPolicyWithoutCallers(t *testing.T) {
	helm := tool(t, "helm")
	lint := func(set ...string) (string, error) {
		args := []string{"lint", "--strict", "--kube-version", kubeVersion, "-f", "testdata/values/default.yaml", chartDir}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		return run(t, ".", helm, args...)
	}
	if out, err := lint("networkPolicy.enabled=true"); err == nil || !strings.Contains(out, "[ERROR] values.yaml: ") || !strings.Contains(out, networkPolicyNoCallers) {
		t.Errorf("helm lint with networkPolicy.enabled and no callers: %v\n%s", err, out)
	}
	for _, set := range [][]string{
		{"networkPolicy.enabled=false"},
		{"networkPolicy.enabled=true", "networkPolicy.callers[0].podSelector.matchLabels.app=billing"},
	} {
		if out, err := lint(set...); err != nil {
			t.Errorf("helm lint %v: %v\n%s", set, err, out)
		}
	}
}
