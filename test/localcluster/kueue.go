package localcluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"
)

// Kueue (--kueue): Kueue's own manager (cmd/kueue from the Go module proxy, unpatched) as one
// more host process of the cluster, with the batch/Job integration on. Its CRDs come from the
// same module and are kept in the cache beside the binary, so `up` needs no Go.
const (
	KueueVersion = "v0.17.0"
	CompKueue    = "kueue"
	kueueModule  = "sigs.k8s.io/kueue"
	// kueueNamespace holds the webhook Secret; the manager's Secret cache is limited to it.
	kueueNamespace = "kueue-system"
	// kueueCertSecret and kueueServiceDNS are the names the manager's certificate rotator
	// checks: the Secret must exist before it starts (the rotator fills it, never creates it)
	// and the serving certificate must be for the in-cluster Service name.
	kueueCertSecret = "kueue-webhook-server-cert"
	kueueServiceDNS = "kueue-webhook-service.kueue-system.svc"
	kueueGroup      = "kueue.x-k8s.io"
)

// KueueBinary is Kueue's manager, installed as released (no replace directives upstream).
func KueueBinary() Binary {
	return Binary{Name: CompKueue, Version: KueueVersion, CacheKey: "kueue-" + KueueVersion,
		Package: kueueModule + "/cmd/kueue", LDFlags: "-s -w", CGO: "0"}
}

// kueueCRDDir is where the CRDs of the release are kept in the cache.
func kueueCRDDir(cacheDir string) string {
	return filepath.Join(cacheDir, KueueBinary().CacheKey, "crds")
}

// KueuePorts are the manager's listeners, picked like the cluster's own ports. Visibility is
// its visibility API server's, 0 when it runs without one (see VisibilityCertDir).
type KueuePorts struct {
	Health     int `json:"health"`
	Metrics    int `json:"metrics"`
	Webhook    int `json:"webhook"`
	Visibility int `json:"visibility,omitempty"`
}

// EnsureKueue builds Kueue's manager into the cache if missing and copies the release's CRDs
// beside it, both under the build lock. It returns the binary's path.
func EnsureKueue(ctx context.Context, cacheDir, sourceDir string, progress io.Writer) (string, error) {
	paths, err := ensureBinaries(ctx, cacheDir, sourceDir, []Binary{KueueBinary()}, progress)
	if err != nil {
		return "", err
	}
	dir := kueueCRDDir(cacheDir)
	if _, err := os.Stat(filepath.Join(dir, ".ok")); err == nil {
		return paths[CompKueue], nil
	}
	unlock, err := lockFile(ctx, filepath.Join(cacheDir, ".build.lock"), progress)
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(dir, ".ok")); err == nil {
		return paths[CompKueue], nil
	}
	return paths[CompKueue], fetchKueueCRDs(ctx, dir)
}

// fetchKueueCRDs copies config/components/crd/bases of the release (go mod download, from the
// module cache or the proxy) into dir, replacing it whole so a partial copy is never used.
func fetchKueueCRDs(ctx context.Context, dir string) error {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", kueueModule+"@"+KueueVersion)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go mod download %s@%s (Kueue's CRDs): %w", kueueModule, KueueVersion, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return fmt.Errorf("go mod download -json %s@%s: no module directory (%v)", kueueModule, KueueVersion, err)
	}
	src := filepath.Join(mod.Dir, "config", "components", "crd", "bases")
	files, err := filepath.Glob(filepath.Join(src, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in %s", src)
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("read Kueue CRD: %w", err)
		}
		if err := os.WriteFile(filepath.Join(tmp, filepath.Base(f)), data, 0o644); err != nil {
			return fmt.Errorf("copy Kueue CRD: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, ".ok"), nil, 0o644); err != nil {
		return fmt.Errorf("mark Kueue CRDs: %w", err)
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("move Kueue CRDs into the cache: %w", err)
	}
	return nil
}

// Paths of Kueue's files in the state dir.
func kueueDir(stateDir string) string        { return filepath.Join(stateDir, "kueue") }
func kueueCertDir(stateDir string) string    { return filepath.Join(kueueDir(stateDir), "certs") }
func kueueConfigPath(stateDir string) string { return filepath.Join(kueueDir(stateDir), "config.yaml") }

// KueueConfiguration is the manager's --config: a minimal one for a host process. Every
// listener is on loopback at a port of its own (the defaults, :8081/:8443/:9443 on every
// interface, would collide between two clusters); no leader election (one replica, and its
// Lease would outlive a killed run); only the batch/Job integration; Jobs without a queue label
// are left alone. With p.Visibility set, VisibilityOnDemand is on and its API server listens
// there (on loopback; its default is :8082 on every interface); with it 0 the feature is off.
func KueueConfiguration(p KueuePorts, certDir string) string {
	visibility := "featureGates:\n  VisibilityOnDemand: false\n"
	if p.Visibility != 0 {
		visibility = fmt.Sprintf("visibilityServer:\n  bindAddress: 127.0.0.1\n  bindPort: %d\nfeatureGates:\n  VisibilityOnDemand: true\n", p.Visibility)
	}
	return fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: 127.0.0.1:%d
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: true
manageJobsWithoutQueueName: false
integrations:
  frameworks: ["batch/job"]
`, kueueNamespace, p.Health, p.Metrics, p.Webhook, certDir) + visibility
}

// kueueCerts are the webhook's CA and serving certificate. The manager's rotator keeps a
// pre-seeded Secret it can parse, which needs an RSA CA key in PKCS#1; the serving certificate
// names both the in-cluster Service (which the rotator checks) and 127.0.0.1 (where the
// apiserver really calls the conversion webhook).
type kueueCerts struct {
	caCert, caKey, cert, key []byte
}

func newKueueCerts(now time.Time) (kueueCerts, error) {
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return kueueCerts{}, fmt.Errorf("generate Kueue CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return kueueCerts{}, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "kueue-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return kueueCerts{}, fmt.Errorf("self-sign Kueue CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return kueueCerts{}, fmt.Errorf("parse Kueue CA: %w", err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return kueueCerts{}, fmt.Errorf("generate Kueue webhook key: %w", err)
	}
	if serial, err = newSerial(); err != nil {
		return kueueCerts{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: kueueServiceDNS},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{kueueServiceDNS}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return kueueCerts{}, fmt.Errorf("sign Kueue webhook certificate: %w", err)
	}
	pemOf := func(typ string, b []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}) }
	return kueueCerts{
		caCert: pemOf("CERTIFICATE", caDER), caKey: pemOf("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(caKey)),
		cert: pemOf("CERTIFICATE", der), key: pemOf("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)),
	}, nil
}

func (k kueueCerts) files() map[string][]byte {
	return map[string][]byte{"ca.crt": k.caCert, "ca.key": k.caKey, "tls.crt": k.cert, "tls.key": k.key}
}

// KueueCRD reads one CRD file and, where the CRD serves more than one version, points its
// conversion webhook at the manager on loopback: the rotator injects its CA into every
// multi-version CRD and does not report ready until it could.
func KueueCRD(data []byte, webhookPort int, caBundle []byte) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		return nil, fmt.Errorf("parse Kueue CRD: %w", err)
	}
	if u.GetKind() != "CustomResourceDefinition" {
		return nil, fmt.Errorf("parse Kueue CRD: kind %q, want CustomResourceDefinition", u.GetKind())
	}
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	if len(versions) > 1 {
		conversion := map[string]any{
			"strategy": "Webhook",
			"webhook": map[string]any{
				"conversionReviewVersions": []any{"v1"},
				"clientConfig": map[string]any{
					"url":      fmt.Sprintf("https://127.0.0.1:%d/convert", webhookPort),
					"caBundle": base64.StdEncoding.EncodeToString(caBundle),
				},
			},
		}
		if err := unstructured.SetNestedField(u.Object, conversion, "spec", "conversion"); err != nil {
			return nil, fmt.Errorf("set conversion of %s: %w", u.GetName(), err)
		}
	}
	return u, nil
}

// startKueue installs Kueue's CRDs, namespace and webhook Secret and starts the manager, then
// waits for its readyz. A port lost to another process between picking and binding is retried
// with new ports, as the cluster's own start does.
func (c *cluster) startKueue(ctx context.Context, admin *clients, bin string) (KueuePorts, error) {
	for attempt := 1; ; attempt++ {
		ports, err := c.startKueueOnce(ctx, admin, bin)
		if err == nil {
			return ports, nil
		}
		var pe *portInUseError
		if attempt < 3 && errors.As(err, &pe) && ctx.Err() == nil {
			c.cfg.logf("kueue lost its port to another process; retrying with new ports")
			stopRecorded(c.cfg, CompKueue)
			continue
		}
		// The manager watches its certificate files with inotify, whose instances are limited
		// per user (fs.inotify.max_user_instances, often 128) and shared with every other
		// process of the user on the machine: a busy moment passes.
		if strings.Contains(tailFile(filepath.Join(c.cfg.StateDir, "logs", CompKueue+".log"), 5), "too many open files") {
			if attempt < 5 && ctx.Err() == nil {
				c.cfg.logf("kueue found no free inotify instance (fs.inotify.max_user_instances); retrying in 3s")
				stopRecorded(c.cfg, CompKueue)
				time.Sleep(3 * time.Second)
				continue
			}
			err = fmt.Errorf("%w (\"too many open files\": the user's inotify instances, fs.inotify.max_user_instances, are used up by other processes)", err)
		}
		return KueuePorts{}, err
	}
}

func (c *cluster) startKueueOnce(ctx context.Context, admin *clients, bin string) (KueuePorts, error) {
	begin := time.Now()
	var p KueuePorts
	taken := map[int]bool{}
	for _, port := range c.ports.all() {
		taken[*port] = true
	}
	for _, dst := range []*int{&p.Health, &p.Metrics, &p.Webhook, &p.Visibility} {
		for attempt := 0; *dst == 0; attempt++ {
			if attempt == 20 {
				return p, errors.New("could not find distinct free loopback ports for Kueue after 20 attempts")
			}
			port, err := c.cfg.PickPort()
			if err != nil {
				return p, err
			}
			if port > 0 && !taken[port] {
				taken[port] = true
				*dst = port
			}
		}
	}
	certs, err := newKueueCerts(time.Now())
	if err != nil {
		return p, err
	}
	visibilityCA, err := EnsureVisibilityCert(ctx, VisibilityCertDir, time.Now(), c.cfg.Progress)
	if err != nil {
		// Kueue itself would try the same directory and fail: run it without the API, whose
		// only user (queue positions) falls back to the queues' counts.
		c.cfg.logf("kueue runs without its visibility API (no queue positions): %v", err)
		p.Visibility = 0
	}
	certDir := kueueCertDir(c.cfg.StateDir)
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return p, fmt.Errorf("create %s: %w", certDir, err)
	}
	for name, data := range certs.files() {
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			return p, fmt.Errorf("write Kueue certificate: %w", err)
		}
	}
	if err := os.WriteFile(kueueConfigPath(c.cfg.StateDir), []byte(KueueConfiguration(p, certDir)), 0o644); err != nil {
		return p, fmt.Errorf("write Kueue configuration: %w", err)
	}
	if err := installKueueCRDs(ctx, admin, kueueCRDDir(c.cfg.CacheDir), p.Webhook, certs.caCert); err != nil {
		return p, err
	}
	if err := ensureKueueSecret(ctx, admin, certs); err != nil {
		return p, err
	}
	c.cfg.logf("starting kueue %s (health port %d, webhook port %d)", KueueVersion, p.Health, p.Webhook)
	proc, err := startProcessEnv(c.cfg.StateDir, CompKueue, bin,
		// --kubeconfig, not only $KUBECONFIG: the visibility server authenticates and
		// authorizes its callers through the kubeconfig that flag names.
		[]string{"--config=" + kueueConfigPath(c.cfg.StateDir), "--kubeconfig=" + KubeconfigPath(c.cfg.StateDir)},
		[]string{"KUBECONFIG=" + KubeconfigPath(c.cfg.StateDir)}, nil)
	if err != nil {
		return p, err
	}
	c.procs = append(c.procs, proc)
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", p.Health)
	if err := c.waitFor(ctx, "kueue /readyz", componentStartupTimeout, func(ctx context.Context) (bool, error) {
		return httpOK(ctx, url), nil
	}, proc); err != nil {
		return p, err
	}
	if p.Visibility != 0 {
		// The manager only logs a visibility server that failed to start; so does this: the
		// queues work without it.
		if err := c.registerVisibility(ctx, admin, p.Visibility, visibilityCA); err != nil {
			var pe *portInUseError
			if errors.As(err, &pe) {
				return p, err // startKueue starts it again on new ports
			}
			c.cfg.logf("kueue's visibility API is not available (no queue positions): %v", err)
		}
	}
	c.cfg.logf("kueue ready (%s)", time.Since(begin).Round(10*time.Millisecond))
	return p, nil
}

// registerVisibility creates the Service and APIService of the visibility API and waits until
// the aggregator reports it Available (it reached the server with the caBundle).
func (c *cluster) registerVisibility(ctx context.Context, admin *clients, port int, caBundle []byte) error {
	svc, apiService := VisibilityObjects(port, caBundle)
	if err := apply(ctx, admin.dyn, schema.GroupVersionResource{Version: "v1", Resource: "services"}, svc); err != nil {
		return err
	}
	if err := apply(ctx, admin.dyn, apiServiceGVR, apiService); err != nil {
		return err
	}
	var why string
	logPath := filepath.Join(c.cfg.StateDir, "logs", CompKueue+".log")
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, componentStartupTimeout, true, func(ctx context.Context) (bool, error) {
		if err := visibilityFailure(tailFile(logPath, 200)); err != nil {
			return false, err
		}
		cur, err := admin.dyn.Resource(apiServiceGVR).Get(ctx, VisibilityAPIServiceName, metav1.GetOptions{})
		if err != nil {
			why = err.Error()
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Available" {
				why = fmt.Sprintf("%v: %v", m["reason"], m["message"])
				return m["status"] == "True", nil
			}
		}
		return false, nil
	})
	var pe *portInUseError
	if errors.As(err, &pe) {
		return err
	}
	if err != nil {
		return fmt.Errorf("APIService %s not Available (%s): %w", VisibilityAPIServiceName, why, err)
	}
	return nil
}

// visibilityFailureLog is what the manager logs when its visibility server does not start; it
// goes on running without it.
const visibilityFailureLog = "Unable to create and start visibility server"

// visibilityFailure reads the end of the manager's log for a visibility server that did not
// start: its port taken between picking and binding (a portInUseError: start again on new
// ports, as for the other listeners), or another reason. nil when the log says neither.
func visibilityFailure(logTail string) error {
	for _, line := range strings.Split(logTail, "\n") {
		if !strings.Contains(line, visibilityFailureLog) {
			continue
		}
		err := fmt.Errorf("the manager's visibility server did not start: %s", strings.TrimSpace(line))
		if strings.Contains(line, "address already in use") {
			return &portInUseError{component: CompKueue, err: err}
		}
		return err
	}
	return nil
}

// installKueueCRDs applies every CRD of the release (server-side: a client-side last-applied
// annotation would take the 1.4 MB Workload CRD past the apiserver's request limit) and waits
// until each is established.
func installKueueCRDs(ctx context.Context, admin *clients, dir string, webhookPort int, caBundle []byte) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no Kueue CRDs in %s (run `localcluster build --kueue`)", dir)
	}
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("read Kueue CRD: %w", err)
		}
		crd, err := KueueCRD(data, webhookPort, caBundle)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := apply(ctx, admin.dyn, crdGVR, crd); err != nil {
			return err
		}
		names = append(names, crd.GetName())
	}
	for _, name := range names {
		if err := waitEstablished(ctx, admin.dyn, name); err != nil {
			return err
		}
	}
	return nil
}

func ensureKueueSecret(ctx context.Context, admin *clients, certs kueueCerts) error {
	// A namespace still terminating (a kueue-down interrupted before it was gone) refuses new
	// content: wait for it to go first.
	namespaces := admin.cs.CoreV1().Namespaces()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, componentStartupTimeout, true, func(ctx context.Context) (bool, error) {
		cur, err := namespaces.Get(ctx, kueueNamespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && cur.DeletionTimestamp == nil), nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s is still terminating: %w", kueueNamespace, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kueueNamespace}}
	if _, err := namespaces.Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", kueueNamespace, err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: kueueCertSecret, Namespace: kueueNamespace}, Data: certs.files()}
	secrets := admin.cs.CoreV1().Secrets(kueueNamespace)
	_, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = secrets.Update(ctx, secret, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("create Secret %s/%s: %w", kueueNamespace, kueueCertSecret, err)
	}
	return nil
}

// stopRecorded stops the component named in its pid file, if it still runs as ours, and
// removes the pid file.
func stopRecorded(cfg Config, name string) {
	byName, _ := pidRecordsByName(cfg.StateDir)
	if r, ok := byName[name]; ok {
		stopRecord(cfg, r)
	}
	_ = os.Remove(pidFilePath(cfg.StateDir, name))
}

// ensureKueue runs Kueue on the cluster c unless it already runs, and records it in st.
func (c *cluster) ensureKueue(ctx context.Context, admin *clients, st *State) error {
	if st.Kueue != nil && componentRunning(c.cfg.StateDir, CompKueue) {
		return nil
	}
	bin, err := EnsureKueue(ctx, c.cfg.CacheDir, c.cfg.SourceDir, c.cfg.Progress)
	if err != nil {
		return err
	}
	stopRecorded(c.cfg, CompKueue)
	ports, err := c.startKueue(ctx, admin, bin)
	if err != nil {
		return err
	}
	st.Kueue = &ports
	return nil
}

// componentRunning reports whether the pid file of name points at a live process of ours.
func componentRunning(stateDir, name string) bool {
	byName, _ := pidRecordsByName(stateDir)
	r, ok := byName[name]
	if !ok {
		return false
	}
	info, alive := ReadProc(r.PID)
	return alive && IsOurs(info, r.Exe, stateDir)
}

// KueueUp installs and runs Kueue on the running cluster in cfg.StateDir (what up --kueue does
// on a cluster that runs without it), leaving a running Kueue as it is.
func KueueUp(ctx context.Context, cfg Config) error {
	return onRunning(ctx, cfg, func(c *cluster, admin *clients, st *State) error {
		if healthy, why := checkHealthy(ctx, c.cfg.StateDir); !healthy {
			return fmt.Errorf("no healthy cluster in %s (%s); run `localcluster up --kueue`", c.cfg.StateDir, why)
		}
		if err := c.ensureKueue(ctx, admin, st); err != nil {
			stopRecorded(c.cfg, CompKueue)
			return err
		}
		return writeState(c.cfg.StateDir, *st)
	})
}

// KueueDown removes Kueue from the running cluster in cfg.StateDir and leaves the cluster as
// one started without --kueue: the manager stopped, then its CRDs (and with them every queue
// and Workload) and its namespace deleted. Tests use it to see a cluster without Kueue again.
func KueueDown(ctx context.Context, cfg Config) error {
	return onRunning(ctx, cfg, func(c *cluster, admin *clients, st *State) error {
		return c.kueueDown(ctx, admin, st)
	})
}

func (c *cluster) kueueDown(ctx context.Context, admin *clients, st *State) error {
	cfg := c.cfg
	// The APIService first: once the manager is gone an APIService left behind is unavailable,
	// and discovery of every client would report its group version as failing.
	if err := admin.dyn.Resource(apiServiceGVR).Delete(ctx, VisibilityAPIServiceName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete APIService %s: %w", VisibilityAPIServiceName, err)
	}
	stopRecorded(cfg, CompKueue)
	st.Kueue = nil
	if err := writeState(cfg.StateDir, *st); err != nil {
		return err
	}
	// With the manager gone nobody removes the finalizers it put on its objects (Workloads, and
	// ClusterQueues, LocalQueues and ResourceFlavors still in use), and a CRD with instances
	// left never goes away.
	crds, err := kueueCRDs(ctx, admin)
	if err != nil {
		return err
	}
	if err := dropKueueFinalizers(ctx, admin, crds); err != nil {
		return err
	}
	for _, crd := range crds {
		if err := admin.dyn.Resource(crdGVR).Delete(ctx, crd.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete CRD %s: %w", crd.name, err)
		}
	}
	if err := admin.cs.CoreV1().Namespaces().Delete(ctx, kueueNamespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete namespace %s: %w", kueueNamespace, err)
	}
	lastDrop := time.Now()
	if err := c.waitFor(ctx, "Kueue's API to be gone", componentStartupTimeout, func(ctx context.Context) (bool, error) {
		if _, err := admin.cs.Discovery().ServerResourcesForGroupVersion(kueueGroup + "/v1beta2"); err != nil {
			return true, nil
		}
		// An object created while the CRDs were being deleted (a Workload for a Job that was
		// just admitted) may still carry a finalizer: drop them again now and then.
		if time.Since(lastDrop) > 5*time.Second {
			lastDrop = time.Now()
			_ = dropKueueFinalizers(ctx, admin, crds)
		}
		return false, nil
	}); err != nil {
		return fmt.Errorf("%w (left: %s)", err, kueueLeft(ctx, admin, crds))
	}
	// And its namespace: a kueue-up right after would otherwise find it terminating and be
	// refused its webhook Secret.
	if err := c.waitFor(ctx, "namespace "+kueueNamespace+" to be gone", componentStartupTimeout, func(ctx context.Context) (bool, error) {
		_, err := admin.cs.CoreV1().Namespaces().Get(ctx, kueueNamespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		return err
	}
	_ = os.RemoveAll(kueueDir(cfg.StateDir))
	cfg.logf("kueue stopped and removed from the cluster in %s", cfg.StateDir)
	return nil
}

// kueueCRD is one of Kueue's CRDs and the version its objects are listed at.
type kueueCRD struct {
	name string
	gvr  schema.GroupVersionResource
}

func kueueCRDs(ctx context.Context, admin *clients) ([]kueueCRD, error) {
	list, err := admin.dyn.Resource(crdGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list CRDs: %w", err)
	}
	var out []kueueCRD
	for _, crd := range list.Items {
		if !strings.HasSuffix(crd.GetName(), "."+kueueGroup) {
			continue
		}
		plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		version := ""
		for _, v := range versions {
			m, _ := v.(map[string]any)
			if storage, _ := m["storage"].(bool); storage {
				version, _ = m["name"].(string)
			}
		}
		out = append(out, kueueCRD{name: crd.GetName(), gvr: schema.GroupVersionResource{Group: kueueGroup, Version: version, Resource: plural}})
	}
	return out, nil
}

// dropKueueFinalizers removes the finalizers of every object of Kueue's CRDs.
func dropKueueFinalizers(ctx context.Context, admin *clients, crds []kueueCRD) error {
	for _, crd := range crds {
		if crd.gvr.Version == "" || crd.gvr.Resource == "" {
			continue
		}
		list, err := admin.dyn.Resource(crd.gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue // the CRD is already gone or not served: nothing of it to free
		}
		for _, o := range list.Items {
			if len(o.GetFinalizers()) == 0 {
				continue
			}
			_, err := admin.dyn.Resource(crd.gvr).Namespace(o.GetNamespace()).Patch(ctx, o.GetName(),
				types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("remove finalizers of %s %s/%s: %w", crd.gvr.Resource, o.GetNamespace(), o.GetName(), err)
			}
		}
	}
	return nil
}

// kueueLeft says which of Kueue's CRDs and objects are still there, for a wait that timed out.
func kueueLeft(ctx context.Context, admin *clients, crds []kueueCRD) string {
	var left []string
	for _, crd := range crds {
		obj, err := admin.dyn.Resource(crdGVR).Get(ctx, crd.name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		what := "CRD " + crd.name
		if conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions"); len(conds) > 0 {
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Terminating" {
					what += fmt.Sprintf(" (%v: %v)", m["reason"], m["message"])
				}
			}
		}
		if list, err := admin.dyn.Resource(crd.gvr).List(ctx, metav1.ListOptions{}); err == nil && len(list.Items) > 0 {
			what += fmt.Sprintf(", %d objects, e.g. %s/%s finalizers %v", len(list.Items), list.Items[0].GetNamespace(), list.Items[0].GetName(), list.Items[0].GetFinalizers())
		}
		left = append(left, what)
	}
	if len(left) == 0 {
		return "no CRD; discovery still serves the group"
	}
	return strings.Join(left, "; ")
}
