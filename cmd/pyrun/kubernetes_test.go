package main

// The Kubernetes manifests in configs/kubernetes are checked against the
// real API types (k8s.io/api), decoded strictly: a misspelt or misplaced
// field fails, as kubectl's server-side validation would. Then what ties
// them to pyrun: the container's arguments are pyrun's own flags (parsed by
// loadOptions), its memory follows the workers and sessions they allow, the probes
// ask /healthz on the port pyrun listens on, the pod runs as non-root on a
// read-only root file system with pyrun's writable folders mounted, and
// every selector finds the pods. Nothing here needs a cluster.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/pyrun/pyrun/lang"
)

// k8sObjects are the manifests' objects, by kind.
type k8sObjects struct {
	statefulSets []*appsv1.StatefulSet
	deployments  []*appsv1.Deployment
	services     []*corev1.Service
	configMaps   []*corev1.ConfigMap
	namespaces   []*corev1.Namespace
	pdbs         []*policyv1.PodDisruptionBudget
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	policies     []*networkingv1.NetworkPolicy
}

// decode decodes one YAML document strictly into its API type.
func (o *k8sObjects) decode(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 StatefulSet":
		return decodeInto(doc, &o.statefulSets)
	case "apps/v1 Deployment":
		return decodeInto(doc, &o.deployments)
	case "v1 Service":
		return decodeInto(doc, &o.services)
	case "v1 ConfigMap":
		return decodeInto(doc, &o.configMaps)
	case "v1 Namespace":
		return decodeInto(doc, &o.namespaces)
	case "policy/v1 PodDisruptionBudget":
		return decodeInto(doc, &o.pdbs)
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return decodeInto(doc, &o.hpas)
	case "networking.k8s.io/v1 NetworkPolicy":
		return decodeInto(doc, &o.policies)
	}
	return fmt.Errorf("kind %q of %q: not one this test knows", tm.Kind, tm.APIVersion)
}

// decodeInto decodes doc strictly into a new T and adds it to list.
func decodeInto[T any](doc []byte, list *[]*T) error {
	v := new(T)
	*list = append(*list, v)
	return yaml.UnmarshalStrict(doc, v)
}

func loadManifests(t *testing.T) *k8sObjects {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "configs", "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in configs/kubernetes: %v", err)
	}
	o := &k8sObjects{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(b, []byte("\n---\n")) {
			if err := o.decode(doc); err != nil {
				t.Errorf("%s, document %d: %v", filepath.Base(f), i+1, err)
			}
		}
	}
	return o
}

// selects reports whether sel picks pods labelled podLabels.
func selects(t *testing.T, sel *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	return !s.Empty() && s.Matches(labels.Set(podLabels))
}

func TestKubernetesManifests(t *testing.T) {
	o := loadManifests(t)
	if t.Failed() {
		return
	}
	if len(o.statefulSets) != 1 {
		t.Fatalf("%d StatefulSets, want pyrun's one", len(o.statefulSets))
	}
	deployment := func(name string) *appsv1.Deployment {
		for _, d := range o.deployments {
			if d.Name == name {
				return d
			}
		}
		t.Fatalf("no Deployment %s", name)
		return nil
	}
	sts := o.statefulSets[0]
	pod := sts.Spec.Template
	if !selects(t, sts.Spec.Selector, pod.Labels) {
		t.Errorf("the StatefulSet's selector %v does not pick its own pods %v", sts.Spec.Selector, pod.Labels)
	}
	var c *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == "pyrun" {
			c = &pod.Spec.Containers[i]
		}
	}
	if c == nil {
		t.Fatal("no container named pyrun")
	}

	t.Run("arguments are pyrun's flags", func(t *testing.T) {
		if len(c.Args) == 0 || c.Args[0] != "serve" {
			t.Fatalf("args %v, want serve and its flags", c.Args)
		}
		// Kubernetes expands $(VAR) from the container's environment; the
		// pod name is the one variable used.
		var args []string
		for _, a := range c.Args[1:] {
			args = append(args, strings.ReplaceAll(a, "$(POD_NAME)", sts.Name+"-0"))
		}
		opts, rest, err := loadOptions("serve", args)
		if err != nil || len(rest) > 0 {
			t.Fatalf("pyrun serve %v: %v (left over: %v)", args, err, rest)
		}
		if opts.instanceID != sts.Name+"-0" {
			t.Errorf("--instance-id %q: want the pod's name, which the router routes on", opts.instanceID)
		}
		if !opts.http.Stateless {
			t.Error("instances behind the Service need --stateless: any of them may take any call")
		}
		if !opts.auth.Configured() {
			t.Error("pyrun listens beyond loopback: it needs access control")
		}

		// Memory (statefulset.yaml, memoryFor): every worker that can exist
		// at once, the pool's and the sessions', per language. The bounds
		// it counts are stated, not left to defaults that may change.
		for _, flag := range []string{"--languages=", "--max-sessions=", "--session-spares="} {
			if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, flag) }) {
				t.Errorf("args %v do not state %s...: the memory is sized from it", args, flag)
			}
		}
		wantLimit, wantRequest := memoryFor(opts)
		lim, req := c.Resources.Limits, c.Resources.Requests
		if got := lim.Memory().Value(); got != wantLimit {
			t.Errorf("memory limit %s; want %s: per language in %v, (workers + max-sessions %d) x (memory limit + max(a quarter, 128Mi) + 128Mi), plus 256Mi (statefulset.yaml)",
				lim.Memory(), resource.NewQuantity(wantLimit, resource.BinarySI), opts.languages, opts.sessions.Limits.Max)
		}
		if got := req.Memory().Value(); got != wantRequest {
			t.Errorf("memory request %s; want %s: 256Mi for each of %d pool workers and %d session spares, and 128Mi (statefulset.yaml)",
				req.Memory(), resource.NewQuantity(wantRequest, resource.BinarySI), opts.pool(lang.Python).workers, max(opts.sessions.Limits.Spares, 0))
		}
		ops, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(ops), "("+lim.Memory().String()+" for") {
			t.Errorf("docs/operations.md's Kubernetes table does not give the memory limit %s", lim.Memory())
		}
		if got := lim.Cpu().MilliValue(); got < int64(opts.pool(lang.Python).workers)*1000 {
			t.Errorf("cpu limit %s for %d workers: a busy worker takes a core", lim.Cpu(), opts.pool(lang.Python).workers)
		}
		if req.Cpu().IsZero() {
			t.Error("no cpu request: the autoscaler's utilisation is relative to it")
		}

		// Probes on /healthz, on the port pyrun listens on.
		_, port, _ := strings.Cut(opts.listen, ":")
		var named string
		for _, p := range c.Ports {
			if fmt.Sprint(p.ContainerPort) == port {
				named = p.Name
			}
		}
		if named == "" {
			t.Errorf("no container port for --listen %s", opts.listen)
		}
		for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
			if p == nil || p.HTTPGet == nil {
				t.Errorf("%s probe: want an HTTP GET of /healthz", name)
				continue
			}
			if p.HTTPGet.Path != "/healthz" || (p.HTTPGet.Port.String() != named && p.HTTPGet.Port.String() != port) {
				t.Errorf("%s probe asks %s on %s; want /healthz on %s", name, p.HTTPGet.Path, p.HTTPGet.Port.String(), opts.listen)
			}
		}

		// Termination: the preStop pause, then the drain, within the grace.
		drain := opts.drainTimeout
		if drain == 0 {
			drain = opts.supervisor.Timeout + 5*time.Second
		}
		var pause time.Duration
		if l := c.Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Sleep != nil {
			pause = time.Duration(l.PreStop.Sleep.Seconds) * time.Second
		} else {
			t.Error("no preStop pause: a pod stops listening before every kube-proxy has taken it out")
		}
		if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < pause+drain+5*time.Second {
			t.Errorf("terminationGracePeriodSeconds %v: want the preStop pause %v plus the drain %v and a margin", g, pause, drain)
		}

		// The runtime is read-only; the folders pyrun writes are volumes.
		mounted := map[string]string{}
		for _, m := range c.VolumeMounts {
			mounted[m.MountPath] = m.Name
		}
		empty, inMemory := map[string]bool{}, map[string]bool{}
		for _, v := range pod.Spec.Volumes {
			if v.EmptyDir != nil {
				empty[v.Name] = true
				inMemory[v.Name] = v.EmptyDir.Medium == "Memory"
			}
		}
		for _, dir := range []string{"deno-cache", "work", "packages"} {
			p := filepath.Join(opts.runtimeDir, dir)
			if name, ok := mounted[p]; !ok || !empty[name] {
				t.Errorf("%s is not a writable (emptyDir) volume: pyrun writes there", p)
			}
		}
		// pyrun's own share of the memory limit holds its Go heap and the
		// rest of its process.
		if lim := opts.goHeapLimit(); lim+64<<20 > 256<<20 {
			t.Errorf("pyrun's Go memory limit is %d MiB: more than its 256Mi share less 64Mi for the rest of the process", lim>>20)
		}
		if l := opts.mcp.RequestLimits(); 3*l.MaxBytes > opts.goHeapLimit()/2 {
			t.Errorf("the requests pyrun may hold (%d MiB, about three times that in memory) leave too little of its Go memory limit", l.MaxBytes>>20)
		}
		// Calls' /output/ files go to disk, not to a tmpfs that counts as
		// the pod's memory.
		if name, ok := mounted[opts.outputDir]; !ok || !empty[name] || inMemory[name] {
			t.Errorf("--output-dir %q is not a writable (emptyDir) volume on disk", opts.outputDir)
		}
	})

	t.Run("non-root, read-only", func(t *testing.T) {
		psc, sc := pod.Spec.SecurityContext, c.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
			t.Error("the pod must run as a non-root user")
		}
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Error("the container's root file system must be read-only")
		}
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Error("the container must drop every capability and never escalate")
		}
	})

	t.Run("Services, budget, autoscaler and network policy find the pods", func(t *testing.T) {
		var headless bool
		for _, s := range o.services {
			if !selects(t, &metav1.LabelSelector{MatchLabels: s.Spec.Selector}, pod.Labels) {
				continue
			}
			if s.Spec.ClusterIP == corev1.ClusterIPNone && s.Name == sts.Spec.ServiceName {
				headless = true
			}
			for _, p := range s.Spec.Ports {
				if p.TargetPort.String() != "mcp" {
					t.Errorf("Service %s targets port %s, want the container's mcp port", s.Name, p.TargetPort.String())
				}
			}
		}
		if !headless {
			t.Errorf("no headless Service named %q (the StatefulSet's serviceName) for per-pod names", sts.Spec.ServiceName)
		}
		if len(o.pdbs) != 1 || !selects(t, o.pdbs[0].Spec.Selector, pod.Labels) {
			t.Error("want one PodDisruptionBudget over the pyrun pods")
		}
		if len(o.hpas) != 1 || o.hpas[0].Spec.ScaleTargetRef.Kind != "StatefulSet" || o.hpas[0].Spec.ScaleTargetRef.Name != sts.Name {
			t.Error("want one HorizontalPodAutoscaler scaling the StatefulSet")
		}
		var walled bool
		for _, np := range o.policies {
			if !selects(t, &np.Spec.PodSelector, pod.Labels) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
				continue
			}
			walled = true
			for _, rule := range np.Spec.Egress {
				for _, peer := range rule.To {
					if peer.IPBlock == nil {
						continue
					}
					for _, private := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} {
						if !slices.Contains(peer.IPBlock.Except, private) {
							t.Errorf("NetworkPolicy %s lets the workers reach %s", np.Name, private)
						}
					}
				}
			}
		}
		if !walled {
			t.Error("no NetworkPolicy limits the pyrun pods' egress")
		}
	})

	t.Run("the router routes sessions to their pod", func(t *testing.T) {
		var conf string
		for _, cm := range o.configMaps {
			conf += cm.Data["default.conf"]
		}
		for _, want := range []string{
			"$http_mcp_param_session_id",
			"(?<pod>" + sts.Name + "-[0-9]+)",
			"$pod." + sts.Spec.ServiceName + "." + sts.Namespace + ".svc.cluster.local",
			"proxy_buffering off",
		} {
			if !strings.Contains(conf, want) {
				t.Errorf("the router's nginx config lacks %q", want)
			}
		}
		if len(deployment("pyrun-router").Spec.Template.Spec.Containers) != 1 {
			t.Fatal("want the router's Deployment with one container")
		}
		if !strings.Contains(conf, "error_page 502 = @anypod") {
			t.Error("the router sends a session's calls nowhere else while its pod is away")
		}
	})

	t.Run("the pods share a session store they can reach", func(t *testing.T) {
		var args []string
		for _, a := range c.Args[1:] {
			args = append(args, strings.ReplaceAll(a, "$(POD_NAME)", sts.Name+"-0"))
		}
		opts, _, err := loadOptions("serve", args)
		if err != nil {
			t.Fatal(err)
		}
		store := deployment("pyrun-store").Spec.Template
		want := "redis://pyrun-store." + sts.Namespace + ".svc.cluster.local:6379/0"
		if opts.store.Where != want {
			t.Errorf("--session-store %q, want the shared store %s", opts.store.Where, want)
		}
		var reaches, only bool
		for _, np := range o.policies {
			if selects(t, &np.Spec.PodSelector, pod.Labels) {
				for _, rule := range np.Spec.Egress {
					for _, peer := range rule.To {
						if peer.PodSelector != nil && selects(t, peer.PodSelector, store.Labels) {
							reaches = slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port.IntValue() == 6379 })
						}
					}
				}
			}
			if selects(t, &np.Spec.PodSelector, store.Labels) && len(np.Spec.Ingress) == 1 && len(np.Spec.Ingress[0].From) == 1 {
				only = selects(t, np.Spec.Ingress[0].From[0].PodSelector, pod.Labels)
			}
		}
		if !reaches || !only {
			t.Errorf("network policies: the pyrun pods reach the store on 6379: %v; only they reach it: %v", reaches, only)
		}
	})
}

// The container recipe bakes the runtime with `pyrun warmup`, runs as a
// non-root user, and its default command is a valid `pyrun serve`.
func TestContainerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "configs", "Containerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	stages := strings.Split(text, "\nFROM ")
	final := stages[len(stages)-1]
	if !strings.Contains(text, "RUN pyrun warmup --runtime-dir /opt/pyrun") {
		t.Error("the image does not bake the runtime and its snapshot (pyrun warmup)")
	}
	var user, cmd string
	for _, line := range strings.Split(final, "\n") {
		if v, ok := strings.CutPrefix(line, "USER "); ok {
			user = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "CMD "); ok {
			cmd = strings.TrimSpace(v)
		}
	}
	if user == "" || strings.HasPrefix(user, "0") || strings.HasPrefix(user, "root") {
		t.Errorf("the final stage runs as %q, want a non-root user", user)
	}
	var args []string
	if err := json.Unmarshal([]byte(cmd), &args); err != nil || len(args) == 0 || args[0] != "serve" {
		t.Fatalf("CMD %s: want a JSON list starting with serve (%v)", cmd, err)
	}
	if _, _, err := loadOptions("serve", args[1:]); err != nil {
		t.Errorf("CMD pyrun %v: %v", args, err)
	}
}
