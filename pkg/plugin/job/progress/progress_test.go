package progress

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/golden"
)

// TestParseGolden folds testdata/status.json (see testdata/README.md for its shape's source).
func TestParseGolden(t *testing.T) {
	data, err := os.ReadFile("testdata/status.json")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(data, true)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "status.golden.json", string(b)+"\n")
	if got, want := p.String()+" eta "+p.ETAString(), "epoch 2/79 eta 9h51m"; got != want {
		t.Errorf("String and ETAString = %q, want %q", got, want)
	}
}

func TestParseTimedelta(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{in: "0:00:00", want: 0},
		{in: "0:00:41", want: 41 * time.Second},
		{in: "0:00:41.250000", want: 41*time.Second + 250*time.Millisecond},
		{in: "0:00:00.000001", want: time.Microsecond},
		{in: "23:59:59.999999", want: 24*time.Hour - time.Microsecond},
		{in: "1 day, 2:03:04", want: 26*time.Hour + 3*time.Minute + 4*time.Second},
		{in: "1 day, 0:00:00", want: 24 * time.Hour},
		{in: "3 days, 0:00:01.5", want: 72*time.Hour + 1500*time.Millisecond},
		{in: "-1 day, 23:59:59", want: -time.Second},
		{in: "-2 days, 23:00:00", want: -25 * time.Hour},
		{in: "-1 day, 23:59:59.500000", want: -500 * time.Millisecond},
		{in: "  0:01:00\n", want: time.Minute},
		{in: "5:32:50", want: 5*time.Hour + 32*time.Minute + 50*time.Second}, // mmengine's eta
		{in: "", wantErr: true},
		{in: "41s", wantErr: true},
		{in: "0:41", wantErr: true},
		{in: "0:00:60", wantErr: true},
		{in: "0:60:00", wantErr: true},
		{in: "0:1:02", wantErr: true},
		{in: "-0:00:01", wantErr: true},
		{in: "+1:00:00", wantErr: true},
		{in: "0:00:01.", wantErr: true},
		{in: "0:00:01.1234567890", wantErr: true},
		{in: "0:00:01.-5", wantErr: true},
		{in: "1 day 0:00:00", wantErr: true},
		{in: "1 week, 0:00:00", wantErr: true},
		{in: "x days, 0:00:00", wantErr: true},
		{in: "999999999 days, 0:00:00", wantErr: true},
		{in: "1 day, ", wantErr: true},
	} {
		got, err := ParseTimedelta(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseTimedelta(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func at(clock string) *time.Time {
	t, err := time.Parse("2006-01-02 15:04:05", "2025-03-14 "+clock)
	if err != nil {
		panic(err)
	}
	return &t
}

const (
	started = `{"date": "3/14/2025", "time": "9:5:7", "status": "STARTED", "verbosity": "INFO", "message": "Starting Training Loop."}`
	epoch1  = `{"epoch": 1, "max_epoch": 79, "time_per_epoch": "0:07:39", "eta": "9:57:02", "date": "3/14/2025", "time": "9:20:28", "status": "RUNNING", "verbosity": "INFO", "message": "Training loop in progress", "kpi": {"train_loss": 1.9, "val_acc": 0.5}}`
	epoch2  = `{"epoch": "2", "max_epoch": "79", "time_per_epoch": 460.5, "eta": "1 day, 0:00:00", "date": "3/14/2025", "time": "9:28:9", "status": "RUNNING", "verbosity": "INFO", "kpi": {"train_loss": 1.6}, "graphical": {"loss": 1.7, "note": "x"}}`
	failure = `{"date": "3/14/2025", "time": "9:30:0", "status": "FAILURE", "verbosity": "ERROR", "message": "CUDA error"}`
)

func TestParse(t *testing.T) {
	epoch1Progress := &Progress{
		Epoch: ptr(1), MaxEpoch: ptr(79), TimePerEpochSeconds: ptr(459.0), ETASeconds: ptr(35822.0),
		Status: "RUNNING", Message: "Training loop in progress",
		KPI:  map[string]float64{"train_loss": 1.9, "val_acc": 0.5},
		Time: at("09:20:28"), EpochTime: at("09:20:28"),
	}
	for _, tc := range []struct {
		name      string
		data      string
		fromStart bool
		want      *Progress
	}{{
		name: "empty", data: "", fromStart: true, want: nil,
	}, {
		name: "only a half-written line", data: started, fromStart: true, want: nil,
	}, {
		name: "half-written last line ignored", data: epoch1 + "\n" + epoch2[:40], fromStart: true,
		want: epoch1Progress,
	}, {
		name: "first line of a tail dropped", data: epoch2[30:] + "\n" + epoch1 + "\n", fromStart: false,
		want: epoch1Progress,
	}, {
		name: "first line kept from the start", data: started + "\n", fromStart: true,
		want: &Progress{Status: "STARTED", Message: "Starting Training Loop.", Time: at("09:05:07")},
	}, {
		name: "a tail of one partial line", data: started + "\n", fromStart: false, want: nil,
	}, {
		name: "noise skipped", fromStart: true,
		data: "Traceback (most recent call last):\n[1, 2]\n{}\n{not json\n\"str\"\n" + started + "\n",
		want: &Progress{Status: "STARTED", Message: "Starting Training Loop.", Time: at("09:05:07")},
	}, {
		name: "only noise", data: "hello\n{}\n", fromStart: true, want: nil,
	}, {
		name:      "status-only line after epochs keeps the epoch; kpi merged; numeric strings",
		data:      started + "\n" + epoch1 + "\r\n" + epoch2 + "\n" + failure + "\n",
		fromStart: true,
		want: &Progress{
			Epoch: ptr(2), MaxEpoch: ptr(79), TimePerEpochSeconds: ptr(460.5), ETASeconds: ptr(86400.0),
			Status: "FAILURE", Message: "CUDA error",
			KPI:  map[string]float64{"train_loss": 1.6, "val_acc": 0.5, "loss": 1.7},
			Time: at("09:30:00"), EpochTime: at("09:28:09"),
		},
	}, {
		name:      "NaN and Infinity as Python writes them",
		data:      `{"epoch": 3, "date": "3/14/2025", "time": "9:0:0", "status": "RUNNING", "message": "NaN, Infinity", "kpi": {"loss": NaN, "grad": -Infinity, "acc": 0.25}}` + "\n",
		fromStart: true,
		want: &Progress{
			Epoch: ptr(3), Status: "RUNNING", Message: "NaN, Infinity",
			KPI:  map[string]float64{"acc": 0.25},
			Time: at("09:00:00"), EpochTime: at("09:00:00"),
		},
	}, {
		name:      "bad epoch fields and bad time are left out",
		data:      `{"epoch": 1.5, "max_epoch": 9, "eta": "soon", "date": "14/3/2025", "time": "9:0:0", "status": "RUNNING"}` + "\n",
		fromStart: true,
		want:      &Progress{Status: "RUNNING"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.data), tc.fromStart)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestString(t *testing.T) {
	for _, tc := range []struct {
		p         *Progress
		want, eta string
	}{
		{p: nil, want: "", eta: ""},
		{p: &Progress{Status: "STARTED"}, want: "STARTED"},
		{p: &Progress{Epoch: ptr(12), MaxEpoch: ptr(80), ETASeconds: ptr(3720.0)}, want: "epoch 12/80", eta: "1h02m"},
		{p: &Progress{Epoch: ptr(12), ETASeconds: ptr(41.25)}, want: "epoch 12", eta: "41s"},
		{p: &Progress{Status: "RUNNING", ETASeconds: ptr(245.0)}, want: "RUNNING", eta: "4m05s"},
		{p: &Progress{ETASeconds: ptr(2*86400 + 3*3600 + 59.0)}, eta: "2d03h"},
		{p: &Progress{ETASeconds: ptr(-5.0)}, eta: "0s"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("String() of %+v = %q, want %q", tc.p, got, tc.want)
		}
		if got := tc.p.ETAString(); got != tc.eta {
			t.Errorf("ETAString() of %+v = %q, want %q", tc.p, got, tc.eta)
		}
	}
}

// FuzzParse checks that no status.json tail makes Parse panic and that what it folds prints.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		started + "\n" + epoch1 + "\n" + epoch2 + "\n" + failure + "\n",
		epoch2[10:] + "\n" + epoch1,
		`{"kpi": {"a": NaN}, "status": "RUNNING", "message": "\"NaN\\"}` + "\n",
		`{"epoch": "1e9", "eta": "-999999 days, 0:00:00"}` + "\n",
	} {
		f.Add([]byte(seed), true)
		f.Add([]byte(seed), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, fromStart bool) {
		p, err := Parse(data, fromStart)
		if err != nil {
			return
		}
		_ = p.String()
		_ = p.ETAString()
		if p != nil && !strings.Contains(string(data), "\n") {
			t.Errorf("Parse found a line in data without a newline: %+v", p)
		}
	})
}
