package jobpods

import (
	"context"
	"strconv"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// controllerPod is a pod as the v1.37 Job controller makes it for rank index of an Indexed Job:
// the index both as annotation and label, the legacy and prefixed name and UID labels, and a
// controller ownerReference.
func controllerPod(job string, uid types.UID, index int) corev1.Pod {
	j := fixture.Job(job).Namespace("ml").UID(string(uid)).Obj()
	return fixture.RankPod(j, index).UID("pod-" + strconv.Itoa(index) + "-" + string(uid)).Val()
}

func TestRank(t *testing.T) {
	const key = batchv1.JobCompletionIndexAnnotation
	withIndex := func(ann, lbl map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: ann, Labels: lbl}}
	}
	real3 := controllerPod("train", "u", 3)
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want int
	}{
		{"as the v1.37 controller sets it (annotation and label)", &real3, 3},
		{"annotation only (servers before 1.28)", withIndex(map[string]string{key: "5"}, nil), 5},
		{"label only", withIndex(nil, map[string]string{key: "6"}), 6},
		{"annotation wins over the label", withIndex(map[string]string{key: "1"}, map[string]string{key: "2"}), 1},
		{"negative annotation falls back to the label", withIndex(map[string]string{key: "-1"}, map[string]string{key: "4"}), 4},
		{"garbage annotation falls back to the label", withIndex(map[string]string{key: "x"}, map[string]string{key: "4"}), 4},
		{"negative everywhere is rank 0", withIndex(map[string]string{key: "-2"}, map[string]string{key: "-3"}), 0},
		{"garbage label alone is rank 0", withIndex(nil, map[string]string{key: "seven"}), 0},
		{"empty value is rank 0", withIndex(map[string]string{key: ""}, nil), 0},
		{"non-indexed pod is rank 0", withIndex(nil, map[string]string{batchv1.JobNameLabel: "train"}), 0},
		{"zero", withIndex(map[string]string{key: "0"}, map[string]string{key: "0"}), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Rank(tc.pod); got != tc.want {
				t.Errorf("Rank = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestOwned(t *testing.T) {
	mine := controllerPod("train", "uid-new", 0)
	older := controllerPod("train", "uid-old", 0)
	labelOnly := controllerPod("train", "uid-new", 1)
	labelOnly.OwnerReferences = nil
	refOnly := controllerPod("train", "uid-new", 2)
	delete(refOnly.Labels, batchv1.ControllerUidLabel)
	notController := controllerPod("train", "uid-new", 3)
	notController.OwnerReferences[0].Controller = nil
	delete(notController.Labels, batchv1.ControllerUidLabel)
	bare := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare", Labels: map[string]string{batchv1.JobNameLabel: "train"}}}
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		uid  types.UID
		want bool
	}{
		{"controller pod of the Job", mine, "uid-new", true},
		{"pod of an older Job of the same name", older, "uid-new", false},
		{"controller-uid label without ownerReference", labelOnly, "uid-new", true},
		{"controller ownerReference without label", refOnly, "uid-new", true},
		{"non-controller ownerReference does not own", notController, "uid-new", false},
		{"pod with the name label only", bare, "uid-new", false},
		{"empty uid owns nothing", bare, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Owned(&tc.pod, tc.uid); got != tc.want {
				t.Errorf("Owned = %v, want %v", got, tc.want)
			}
		})
	}
	got := Keep([]corev1.Pod{older, mine, labelOnly, bare}, "uid-new")
	if len(got) != 2 || got[0].Name != mine.Name || got[1].Name != labelOnly.Name {
		t.Errorf("Keep kept %v", names(got))
	}
}

func names(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func TestSelectors(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{Selector("train"), "batch.kubernetes.io/job-name=train"},
		{UIDSelector("u-1"), "batch.kubernetes.io/controller-uid=u-1"},
	} {
		if tc.got != tc.want {
			t.Errorf("selector %q, want %q", tc.got, tc.want)
		}
	}
	// The selector matches what the Job controller puts on its pods.
	p := controllerPod("train", "u-1", 0)
	for _, s := range []string{Selector("train"), UIDSelector("u-1")} {
		sel, err := labels.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		if !sel.Matches(labels.Set(p.Labels)) {
			t.Errorf("%s does not match a controller pod", s)
		}
	}
	if sel, _ := labels.Parse(Selector("train")); sel.Matches(labels.Set(controllerPod("train-2", "u-2", 0).Labels)) {
		t.Errorf("Selector(train) matches the pods of train-2")
	}
}

// TestFetch: one get and one list with the job-name selector, pages followed, the pods of an
// older Job of the same name dropped.
func TestFetch(t *testing.T) {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml", UID: "uid-new"}}
	objs := []runtime.Object{job}
	for i := range 3 {
		p := controllerPod("train", "uid-new", i)
		objs = append(objs, &p)
	}
	old := controllerPod("train", "uid-old", 0)
	old.Name = "train-0-older"
	other := controllerPod("eval", "uid-eval", 0)
	objs = append(objs, &old, &other)
	client := fake.NewClientset(objs...)
	var gets, lists int
	client.PrependReactor("get", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) { gets++; return false, nil, nil })
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		lists++
		if sel := a.(k8stesting.ListAction).GetListRestrictions().Labels.String(); sel != Selector("train") {
			t.Errorf("pods listed with %q", sel)
		}
		return false, nil, nil
	})
	got, pods, err := Fetch(context.Background(), client, "ml", "train")
	if err != nil || got.UID != "uid-new" {
		t.Fatalf("Fetch: %v %v", got, err)
	}
	if len(pods) != 3 {
		t.Errorf("pods %v, want the 3 of uid-new", names(pods))
	}
	if gets != 1 || lists != 1 {
		t.Errorf("%d gets and %d lists, want 1 and 1", gets, lists)
	}
	owned, err := ListOf(context.Background(), client, job)
	if err != nil || len(owned) != 3 {
		t.Errorf("ListOf: %v %v", names(owned), err)
	}
	if j, _, err := Fetch(context.Background(), fake.NewClientset(), "ml", "absent"); err == nil || j != nil {
		t.Errorf("Fetch of an absent Job: %v, %v", j, err)
	}
}
