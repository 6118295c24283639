package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestApplyOnlyWhenMissingOrDifferent(t *testing.T) {
	want := map[string]string{"size": "3", "image": "redis:7"}
	have := corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			ResourceVersion: "17",
			OwnerReferences: []metav1.OwnerReference{{UID: "u1", Controller: ptr.To(true)}},
		},
		Data: map[string]string{"size": "3", "image": "redis:7", "extra": "x"},
	}
	if !configMapDiffers(false, &corev1.ConfigMap{}, want, "u1") {
		t.Error("a missing ConfigMap must be applied")
	}
	if configMapDiffers(true, &have, want, "u1") {
		t.Error("keys someone else added are not a difference")
	}
	changed := *have.DeepCopy()
	changed.Data["size"] = "9"
	if !configMapDiffers(true, &changed, want, "u1") {
		t.Error("a changed value is a difference")
	}
	orphan := *have.DeepCopy()
	orphan.OwnerReferences = nil
	if !configMapDiffers(true, &orphan, want, "u1") {
		t.Error("a missing controller reference is a difference")
	}
	if !configMapDiffers(true, &have, want, "u2") {
		t.Error("another controller is a difference")
	}
}

func TestWrittenSkipsARepeatOnlyWhileTheCacheIsStale(t *testing.T) {
	var w Written
	if w.Already("k", "1", "a") {
		t.Fatal("nothing written yet")
	}
	w.Remember("k", "1", "a")
	for _, c := range []struct {
		rv, what string
		want     bool
		why      string
	}{
		{"1", "a", true, "same stale cache, same write"},
		{"1", "b", false, "different write"},
		{"2", "a", false, "cache moved on"},
		{"1", "a", false, "entry forgotten"},
	} {
		if got := w.Already("k", c.rv, c.what); got != c.want {
			t.Errorf("%s: Already = %v", c.why, got)
		}
	}
}
