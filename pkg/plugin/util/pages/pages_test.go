package pages

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeList serves names in pages of opts.Limit, as the API server does, and fails at page failAt.
func fakeList(names []string, failAt int, calls *[]metav1.ListOptions) func(context.Context, metav1.ListOptions) (*corev1.NodeList, error) {
	return func(_ context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
		*calls = append(*calls, opts)
		if len(*calls) == failAt {
			return nil, errors.New("boom")
		}
		start := 0
		if opts.Continue != "" {
			var err error
			if start, err = strconv.Atoi(opts.Continue); err != nil {
				return nil, fmt.Errorf("continue token %q: %w", opts.Continue, err)
			}
		}
		end := min(start+int(opts.Limit), len(names))
		l := &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: fmt.Sprint(len(*calls))}}
		for _, n := range names[start:end] {
			l.Items = append(l.Items, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
		}
		if end < len(names) {
			l.Continue = fmt.Sprint(end)
		}
		return l, nil
	}
}

func TestEach(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e"}
	var calls []metav1.ListOptions
	var got []string
	rv, err := Each(context.Background(), metav1.ListOptions{Limit: 2, LabelSelector: "x=y"}, fakeList(names, 0, &calls),
		func(l *corev1.NodeList) {
			for _, n := range l.Items {
				got = append(got, n.Name)
			}
		})
	if err != nil || rv != "1" || fmt.Sprint(got) != fmt.Sprint(names) || len(calls) != 3 {
		t.Fatalf("Each = %q, %v; got %v in %d calls; want rv 1 (the first page's), all names in 3 calls", rv, err, got, len(calls))
	}
	for _, c := range calls {
		if c.LabelSelector != "x=y" || c.Limit != 2 {
			t.Errorf("a page was asked with %+v: the options must carry over", c)
		}
	}

	calls, got = nil, nil
	_, err = Each(context.Background(), metav1.ListOptions{Limit: 2}, fakeList(names, 2, &calls), func(l *corev1.NodeList) {
		for _, n := range l.Items {
			got = append(got, n.Name)
		}
	})
	if err == nil || fmt.Sprint(got) != "[a b]" {
		t.Errorf("failing on page 2: err %v, visited %v; want the error and the first page", err, got)
	}
}
