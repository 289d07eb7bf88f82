package list_test

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

type watchInterface = watch.Interface

// watchRecorder is a fake watch that remembers the options it was opened with.
type watchRecorder struct {
	opts metav1.ListOptions
	fw   *watch.RaceFreeFakeWatcher
}

func newWatchRecorder(opts metav1.ListOptions) *watchRecorder {
	return &watchRecorder{opts: opts, fw: watch.NewRaceFreeFake()}
}
