package createpullsecret_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/createpullsecret"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
)

const key = "nvapi-Zk3q9TOPSECRET"

func run(c *fake.Clientset, env map[string]string, stdin string, args ...string) cmdtest.Result {
	return cmdtest.Cmd{NS: "ml", Client: c, Env: env, Stdin: stdin}.Run(context.Background(),
		append([]string{"create-pull-secret"}, args...)...)
}

func noKey(t *testing.T, r cmdtest.Result) {
	t.Helper()
	b64 := base64.StdEncoding.EncodeToString([]byte("$oauthtoken:" + key))
	for _, s := range []string{key, b64, base64.StdEncoding.EncodeToString([]byte(key))} {
		if strings.Contains(r.Stdout+r.Stderr, s) {
			t.Fatalf("the key leaked into the output:\n%s\n%s", r.Stdout, r.Stderr)
		}
	}
}

func stored(t *testing.T, c *fake.Clientset) dockerConfig {
	t.Helper()
	s, err := c.CoreV1().Secrets("ml").Get(context.Background(), "ngc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Type != corev1.SecretTypeDockerConfigJson {
		t.Fatalf("type %s", s.Type)
	}
	var cfg dockerConfig
	if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

type dockerConfig struct {
	Auths map[string]struct{ Username, Password, Auth string } `json:"auths"`
}

func TestCreateFromStdin(t *testing.T) {
	c := fake.NewClientset()
	r := run(c, nil, key+"\n", "ngc", "--from-stdin")
	if r.Code != 0 || r.Stdout != "secret/ngc created\n" || r.Stderr != "" {
		t.Fatalf("%+v", r)
	}
	noKey(t, r)
	a := stored(t, c).Auths["nvcr.io"]
	if a.Username != "$oauthtoken" || a.Password != key || a.Auth != base64.StdEncoding.EncodeToString([]byte("$oauthtoken:"+key)) {
		t.Fatalf("auth %+v", a)
	}
}

func TestCreateFromEnv(t *testing.T) {
	c := fake.NewClientset()
	if r := run(c, map[string]string{"NGC_KEY": key}, "", "ngc"); r.Code != 0 {
		t.Fatalf("%+v", r)
	}
	if stored(t, c).Auths["nvcr.io"].Password != key {
		t.Fatal("key not stored")
	}
}

func TestExistingIsRefusedUnlessOverwrite(t *testing.T) {
	old := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ngc", Namespace: "ml"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"nvcr.io":{"password":"old"}}}`)}}
	c := fake.NewClientset(old)
	r := run(c, nil, key, "ngc", "--from-stdin")
	if r.Code != int(exitcode.AlreadyExists) || !strings.Contains(r.Stderr, "already exists in namespace ml and was left untouched: pass --overwrite") {
		t.Fatalf("%+v", r)
	}
	if stored(t, c).Auths["nvcr.io"].Password != "old" {
		t.Fatal("existing secret changed")
	}
	r = run(c, nil, key, "ngc", "--from-stdin", "--overwrite")
	if r.Code != 0 || r.Stdout != "secret/ngc replaced\n" || stored(t, c).Auths["nvcr.io"].Password != key {
		t.Fatalf("%+v", r)
	}
	noKey(t, r)
}

func TestMissingKey(t *testing.T) {
	for _, tc := range []struct {
		env   map[string]string
		stdin string
		args  []string
		want  string
	}{
		{nil, "", []string{"ngc"}, "no key: $NGC_KEY is unset or empty"},
		{map[string]string{"NGC_KEY": "  \n"}, "", []string{"ngc"}, "no key: $NGC_KEY is unset or empty"},
		{map[string]string{"NGC_KEY": key}, "\n", []string{"ngc", "--from-stdin"}, "no key on stdin"},
		{nil, "a b\n", []string{"ngc", "--from-stdin"}, "contains whitespace"},
		{nil, "", []string{}, "expected one NAME"},
		{nil, "", []string{"ngc", key}, "expected one NAME"},
	} {
		c := fake.NewClientset()
		r := run(c, tc.env, tc.stdin, tc.args...)
		if r.Code != int(exitcode.Usage) || !strings.Contains(r.Stderr, tc.want) || len(c.Actions()) != 0 {
			t.Errorf("%v: %+v (%d requests)", tc.args, r, len(c.Actions()))
		}
		if strings.Contains(r.Stderr, key) {
			t.Errorf("%v: key in the error: %s", tc.args, r.Stderr)
		}
	}
}

func TestDryRunIsRedacted(t *testing.T) {
	c := fake.NewClientset()
	r := run(c, nil, key, "ngc", "--from-stdin", "--dry-run=client")
	if r.Code != 0 || !strings.Contains(r.Stdout, "type: kubernetes.io/dockerconfigjson") || !strings.Contains(r.Stdout, `"password":"REDACTED"`) || len(c.Actions()) != 0 {
		t.Fatalf("%+v", r)
	}
	noKey(t, r)

	var sent *metav1.CreateOptions
	c.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o := a.(k8stesting.CreateActionImpl).CreateOptions
		sent = &o
		return true, a.(k8stesting.CreateAction).GetObject(), nil
	})
	r = run(c, nil, key, "ngc", "--from-stdin", "--dry-run=server", "-o", "json")
	if r.Code != 0 || sent == nil || len(sent.DryRun) != 1 || !strings.Contains(r.Stdout, `REDACTED`) {
		t.Fatalf("%+v %+v", r, sent)
	}
	noKey(t, r)
}

func TestAPIErrorsNeverCarryTheKey(t *testing.T) {
	c := fake.NewClientset()
	c.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewBadRequest("invalid value " + key)
	})
	r := run(c, nil, key, "ngc", "--from-stdin")
	if r.Code != int(exitcode.Error) || !strings.Contains(r.Stderr, "invalid value REDACTED") {
		t.Fatalf("%+v", r)
	}
	noKey(t, r)
	c = fake.NewClientset()
	c.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "ngc", nil)
	})
	if r := run(c, nil, key, "ngc", "--from-stdin"); r.Code != int(exitcode.Forbidden) {
		t.Fatalf("forbidden: %+v", r)
	}
}

func TestRedactKeepsShape(t *testing.T) {
	s := createpullsecret.Redact(createpullsecret.Build("ml", "ngc", key))
	if s.Data != nil || strings.Contains(s.StringData[corev1.DockerConfigJsonKey], key) || s.Type != corev1.SecretTypeDockerConfigJson {
		t.Fatalf("%+v", s)
	}
}
