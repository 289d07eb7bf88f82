package tail

import (
	"testing"
	"time"
)

func TestLastStamp(t *testing.T) {
	tests := []struct {
		raw  string
		want string // RFC3339Nano, "" for none
	}{
		{"2026-12-05T10:00:01.123456789Z epoch 3 loss 0.2\n", "2026-12-05T10:00:01.123456789Z"},
		{"2026-12-05T10:00:01Z \r step 1\r step 2", "2026-12-05T10:00:01Z"},
		{"", ""},
		{"unable to retrieve container logs for containerd://abc", ""},
	}
	for _, tc := range tests {
		ts, ok := lastStamp([]byte(tc.raw))
		if tc.want == "" {
			if ok {
				t.Errorf("%q: got %v, want none", tc.raw, ts)
			}
			continue
		}
		want, _ := time.Parse(time.RFC3339Nano, tc.want)
		if !ok || !ts.Equal(want) {
			t.Errorf("%q: got %v %v, want %v", tc.raw, ts, ok, want)
		}
	}
}
