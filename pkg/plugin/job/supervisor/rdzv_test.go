package supervisor

import (
	"slices"
	"testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
)

func TestRdzvConf(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	elastic := map[string]string{jobspec.EnvPETRdzvBackend: jobspec.ElasticRdzvBackend}
	if got := rdzvConf(env(elastic), 0); !slices.Equal(got, []string{"PET_RDZV_CONF=is_host=1"}) {
		t.Errorf("index 0: %v", got)
	}
	if got := rdzvConf(env(elastic), 2); !slices.Equal(got, []string{"PET_RDZV_CONF=is_host=0"}) {
		t.Errorf("index 2: %v", got)
	}
	// The user's own conf gets is_host added, unless it says is_host; a job that is not
	// elastic is left alone.
	conf := func(c string) map[string]string {
		return map[string]string{jobspec.EnvPETRdzvBackend: jobspec.ElasticRdzvBackend, jobspec.EnvPETRdzvConf: c}
	}
	if got := rdzvConf(env(conf("last_call_timeout=5")), 1); !slices.Equal(got, []string{"PET_RDZV_CONF=last_call_timeout=5,is_host=0"}) {
		t.Errorf("user's conf: %v", got)
	}
	if got := rdzvConf(env(conf("timeout=900, is_host=true")), 0); got != nil {
		t.Errorf("user's conf with is_host: %v", got)
	}
	if got := rdzvConf(env(nil), 0); got != nil {
		t.Errorf("fixed-size job: %v", got)
	}
}
