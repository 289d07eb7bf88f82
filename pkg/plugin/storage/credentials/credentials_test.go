package credentials

import (
	"slices"
	"strings"
	"testing"
)

func TestNameRules(t *testing.T) {
	for _, tc := range []struct {
		name         string
		known, looks bool
	}{
		// The known credentials, whatever their case.
		{"NGC_KEY", true, true}, {"NGC_API_KEY", true, true}, {"HF_TOKEN", true, true},
		{"HUGGING_FACE_HUB_TOKEN", true, true}, {"WANDB_API_KEY", true, true},
		{"AWS_SECRET_ACCESS_KEY", true, true}, {"AWS_SESSION_TOKEN", true, true},
		{"ACCESS_KEY", true, true}, {"SECRET_KEY", true, true}, {"GITHUB_TOKEN", true, true},
		{"hf_token", true, true}, {"Ngc_Key", true, true},
		// Names that look like credentials.
		{"MY_TOKEN", false, true}, {"CLIENT_SECRET", false, true}, {"MINIO_SECRET_KEY", false, true},
		{"DB_PASSWORD", false, true}, {"OPENAI_API_KEY", false, true}, {"db_password", false, true},
		// Names that do not.
		{"PATH", false, false}, {"NCCL_SOCKET_IFNAME", false, false}, {"TOKENIZERS_PARALLELISM", false, false},
		{"MAX_TOKENS", false, false}, {"SECRET_PATH", false, false}, {"AWS_ACCESS_KEY_ID", false, false},
		{"PASSWORD_FILE", false, false}, {"TOKEN", false, false},
	} {
		if got := IsKnown(tc.name); got != tc.known {
			t.Errorf("IsKnown(%q) = %v, want %v", tc.name, got, tc.known)
		}
		if got := LooksSecret(tc.name); got != tc.looks {
			t.Errorf("LooksSecret(%q) = %v, want %v", tc.name, got, tc.looks)
		}
	}
}

func TestParseRefs(t *testing.T) {
	got, err := ParseRefs("secret-env", []string{"NGC_KEY", "HF_TOKEN=MY_HF", "_X1=y_2"})
	want := []Ref{{"NGC_KEY", "NGC_KEY"}, {"HF_TOKEN", "MY_HF"}, {"_X1", "y_2"}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("ParseRefs = %v, %v; want %v", got, err, want)
	}
	for _, tc := range []struct {
		value, want, secret string
	}{
		// A value where a name belongs is refused and never quoted back.
		{"NGC_KEY=nvapi-Abc123secret", "LOCAL_NAME must be the name of a variable", "nvapi-Abc123secret"},
		{"NGC_KEY=abc def", "LOCAL_NAME must be the name", "abc def"},
		{"nvapi-Abc123secret", "expected NAME or NAME=LOCAL_NAME", "nvapi-Abc123secret"},
		{"1ABC", "expected NAME or NAME=LOCAL_NAME", "1ABC"},
		{"=HF", "expected NAME or NAME=LOCAL_NAME", "=HF"},
		{"HF_TOKEN=", "LOCAL_NAME must be the name", "HF_TOKEN=="},
		{"my.var=X", "expected NAME or NAME=LOCAL_NAME", "my.var"},
	} {
		_, err := ParseRefs("secret-env", []string{"OK", tc.value})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), tc.secret) {
			t.Errorf("ParseRefs(%q) = %v, want an error with %q that does not quote %q", tc.value, err, tc.want, tc.secret)
		}
	}
	if _, err := ParseRefs("secret-env", []string{"A", "A=B"}); err == nil || !strings.Contains(err.Error(), "A is given more than once") {
		t.Errorf("duplicate: %v", err)
	}
}

func TestResolve(t *testing.T) {
	env := map[string]string{"NGC_KEY": "nvapi-1", "MY_HF": "hf_2", "EMPTY": ""}
	getenv := func(k string) string { return env[k] }
	got, err := Resolve("secret-env", getenv, []Ref{{"NGC_KEY", "NGC_KEY"}, {"HF_TOKEN", "MY_HF"}})
	want := []Value{{"NGC_KEY", "nvapi-1"}, {"HF_TOKEN", "hf_2"}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Resolve = %v, %v; want %v", got, err, want)
	}
	_, err = Resolve("secret-env", getenv, []Ref{{"NGC_KEY", "NGC_KEY"}, {"WANDB_API_KEY", "WANDB_API_KEY"}, {"X", "EMPTY"}})
	if err == nil || err.Error() != "--secret-env: $WANDB_API_KEY, $EMPTY are unset or empty in this shell: export them first (nothing was created)" {
		t.Fatalf("Resolve with unset variables = %v", err)
	}
	_, err = Resolve("secret-env", getenv, []Ref{{"HF_TOKEN", "HF_TOKEN"}})
	if err == nil || err.Error() != "--secret-env: $HF_TOKEN is unset or empty in this shell: export it first (nothing was created)" {
		t.Fatalf("Resolve with one unset variable = %v", err)
	}
	if strings.Contains(err.Error(), "nvapi-1") {
		t.Fatal("a value leaked")
	}
}

func TestFromEnvLeavesOutUnsetAndEmpty(t *testing.T) {
	env := map[string]string{"A": "1", "B": ""}
	got := FromEnv(func(k string) string { return env[k] }, "A", "B", "C")
	if len(got) != 1 || got["A"] != "1" {
		t.Fatalf("FromEnv = %v, want only A", got)
	}
}
