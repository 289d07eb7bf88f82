package jobspec

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseNodes(t *testing.T) {
	for _, tc := range []struct {
		in            string
		n, minN, maxN int
		wantErr       string
	}{
		{in: "4", n: 4},
		{in: "1:3", n: 3, minN: 1, maxN: 3},
		{in: " 2:2 ", n: 2, minN: 2, maxN: 2},
		{in: "0:2", wantErr: "MIN must be 1 or more"},
		{in: "3:2", wantErr: "MIN must not be above MAX"},
		{in: "a:b", wantErr: "whole numbers"},
		{in: "1:", wantErr: "whole numbers"},
		{in: ":3", wantErr: "whole numbers"},
		{in: "1:2:3", wantErr: "whole numbers"},
		{in: "four", wantErr: "not a number of nodes nor MIN:MAX"},
	} {
		n, minN, maxN, err := ParseNodes(tc.in)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.wantErr)
			}
		case err != nil || n != tc.n || minN != tc.minN || maxN != tc.maxN:
			t.Errorf("%q: %d %d:%d %v, want %d %d:%d", tc.in, n, minN, maxN, err, tc.n, tc.minN, tc.maxN)
		}
	}
}

func TestElasticSize(t *testing.T) {
	for _, tc := range []struct {
		minN, maxN int
		fit        int64
		want       int
	}{{1, 3, 0, 1}, {1, 3, 2, 2}, {1, 3, 9, 3}, {2, 2, 5, 2}} {
		if got := ElasticSize(tc.minN, tc.maxN, tc.fit); got != tc.want {
			t.Errorf("ElasticSize(%d, %d, %d) = %d, want %d", tc.minN, tc.maxN, tc.fit, got, tc.want)
		}
	}
}

func elasticSpec() Spec {
	s := validSpec()
	s.Name, s.Nodes, s.NodesMin, s.NodesMax, s.Retries = "ddp", 2, 1, 3, DefaultElasticRetries
	s.Staging = &Staging{StagerImage: "stager:1", NoS3: true, NoLogArchive: true}
	return s
}

func TestValidateElastic(t *testing.T) {
	valid := elasticSpec()
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid elastic spec: %v", err)
	}
	for name, tc := range map[string]struct {
		edit func(*Spec)
		want string
	}{
		"queue":              {func(s *Spec) { s.Queue = "gpus" }, "cannot go with --queue"},
		"retries 0":          {func(s *Spec) { s.Retries = 0 }, "cannot go with --retries 0"},
		"size outside range": {func(s *Spec) { s.Nodes = 4 }, "outside --nodes 1:3"},
		"MIN above MAX":      {func(s *Spec) { s.NodesMin = 4 }, "MIN must be 1 or more and not above MAX"},
		"no supervisor":      {func(s *Spec) { s.Staging = nil }, "without the supervisor"},
		"hostname too long at MAX": {func(s *Spec) {
			s.NodesMax, s.Name = 100, strings.Repeat("a", 61)
		}, "pod hostname"},
	} {
		s := elasticSpec()
		tc.edit(&s)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

func TestNodesRangeAndScale(t *testing.T) {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{NodesRangeAnnotation: "2:5"}}}
	if minN, maxN, ok := NodesRange(job); !ok || minN != 2 || maxN != 5 {
		t.Errorf("NodesRange = %d, %d, %v", minN, maxN, ok)
	}
	for _, v := range []string{"", "4", "x"} {
		job.Annotations[NodesRangeAnnotation] = v
		if _, _, ok := NodesRange(job); ok {
			t.Errorf("annotation %q read as a range", v)
		}
	}
	if err := ValidateScale(1, 2, 5); err == nil || !strings.Contains(err.Error(), "from 2 to 5 ranks") {
		t.Errorf("below MIN: %v", err)
	}
	if err := ValidateScale(5, 2, 5); err != nil {
		t.Errorf("MAX: %v", err)
	}
	if RdzvHostConf(0) != "is_host=1" || RdzvHostConf(2) != "is_host=0" {
		t.Error("RdzvHostConf")
	}
}

func TestElasticLogLevel(t *testing.T) {
	level := func(s Spec) []string {
		var out []string
		for _, e := range Build(s).Job.Spec.Template.Spec.Containers[0].Env {
			if e.Name == EnvTorchLogLevel {
				out = append(out, e.Value)
			}
		}
		return out
	}
	if got := level(elasticSpec()); len(got) != 1 || got[0] != "INFO" {
		t.Errorf("elastic job's LOGLEVEL: %v, want INFO once", got)
	}
	s := elasticSpec()
	s.Env = []KeyValue{{Key: EnvTorchLogLevel, Value: "WARNING"}}
	if got := level(s); len(got) != 1 || got[0] != "WARNING" {
		t.Errorf("the user's LOGLEVEL: %v, want only theirs", got)
	}
	fixed := validSpec()
	fixed.Nodes = 2
	if got := level(fixed); len(got) != 0 {
		t.Errorf("a job of fixed size sets LOGLEVEL: %v", got)
	}
}
