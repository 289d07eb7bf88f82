package plural

import "testing"

func TestN(t *testing.T) {
	for _, tc := range []struct {
		n    int
		noun string
		want string
	}{
		{0, "rank", "0 ranks"},
		{1, "rank", "1 rank"},
		{2, "rank", "2 ranks"},
		{1, "GPU", "1 GPU"},
		{8, "GPU", "8 GPUs"},
		{-1, "byte", "-1 bytes"},
	} {
		if got := N(tc.n, tc.noun); got != tc.want {
			t.Errorf("N(%d, %q) = %q, want %q", tc.n, tc.noun, got, tc.want)
		}
	}
}

func TestWord(t *testing.T) {
	if got := Word(1, "is", "are"); got != "is" {
		t.Errorf("Word(1) = %q", got)
	}
	for _, n := range []int{0, 2, 10} {
		if got := Word(n, "is", "are"); got != "are" {
			t.Errorf("Word(%d) = %q", n, got)
		}
	}
}
