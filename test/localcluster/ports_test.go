package localcluster

import (
	"errors"
	"testing"
)

func TestPickPortsDistinct(t *testing.T) {
	seq := []int{5000, 5000, 5001, 0, 5001, 5002, 5003, 5004, 5005}
	i := 0
	pick := func() (int, error) { p := seq[i%len(seq)]; i++; return p, nil }
	p, err := PickPorts(pick)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, port := range p.all() {
		if *port <= 0 || seen[*port] {
			t.Fatalf("ports not distinct and positive: %+v", p)
		}
		seen[*port] = true
	}
}

func TestPickPortsErrors(t *testing.T) {
	boom := errors.New("no ports")
	if _, err := PickPorts(func() (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Errorf("err = %v, want wrapping %v", err, boom)
	}
	if _, err := PickPorts(func() (int, error) { return 7000, nil }); err == nil {
		t.Error("a picker that always returns the same port must fail, not loop")
	}
}

func TestFreeLoopbackPort(t *testing.T) {
	p, err := PickPorts(FreeLoopbackPort)
	if err != nil {
		t.Fatal(err)
	}
	if p.APIServer < 1024 {
		t.Errorf("unexpected port %d", p.APIServer)
	}
}
