// Package controller holds the reconcilers: Cache (the cache-bench workload) and Ticker (the
// timer workload).
package controller

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	benchv1 "khai.test/benches/controller-runtime-baseline/api/v1"
)

// FieldManager is the field manager of the ConfigMap apply and the status patch.
const FieldManager = "controller-runtime-baseline"

// CacheReconciler reconciles a Cache: a ConfigMap <name>-config holding its size and image,
// controlled by the Cache, then status {phase: Ready, configMap, observedGeneration}.
type CacheReconciler struct {
	client.Client
	Scheme *runtime.Scheme
	// MaxConcurrentReconciles, when above 0, overrides controller-runtime's default (1).
	MaxConcurrentReconciles int

	written Written
}

// +kubebuilder:rbac:groups=bench.khai.dev,resources=caches,verbs=get;list;watch
// +kubebuilder:rbac:groups=bench.khai.dev,resources=caches/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch

// Reconcile brings one Cache's ConfigMap and status to what its spec says. Every read comes from
// the manager's informer cache; a write happens only when the cached state differs from the
// desired one, so a steady Cache costs no API requests.
func (r *CacheReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)

	var cache benchv1.Cache
	if err := r.Get(ctx, req.NamespacedName, &cache); err != nil {
		// Deleted: the ConfigMap goes with it through its ownerReference.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	cmName := cache.Name + "-config"
	want := map[string]string{
		"size":  strconv.FormatInt(cache.Spec.Size, 10),
		"image": cache.Spec.Image,
	}
	var cached corev1.ConfigMap
	seen := ""
	switch err := r.Get(ctx, types.NamespacedName{Namespace: cache.Namespace, Name: cmName}, &cached); {
	case err == nil:
		seen = cached.ResourceVersion
	case apierrors.IsNotFound(err):
	default:
		return ctrl.Result{}, err
	}
	key, what := "cm/"+cache.Namespace+"/"+cmName, fmt.Sprint(want, cache.UID)
	if configMapDiffers(seen != "", &cached, want, cache.UID) && !r.written.Already(key, seen, what) {
		log.V(1).Info("applying ConfigMap", "configMap", cmName)
		if err := r.applyConfigMap(ctx, &cache, cmName, want); err != nil {
			return ctrl.Result{}, err
		}
		r.written.Remember(key, seen, what)
	}

	status := benchv1.CacheStatus{Phase: "Ready", ConfigMap: cmName, ObservedGeneration: cache.Generation}
	key, what = "status/"+string(cache.UID), fmt.Sprint(status)
	if cache.Status != status && !r.written.Already(key, cache.ResourceVersion, what) {
		log.V(1).Info("patching status")
		seen := cache.ResourceVersion
		orig := cache.DeepCopy()
		cache.Status = status
		if err := r.Status().Patch(ctx, &cache, client.MergeFrom(orig), client.FieldOwner(FieldManager)); err != nil {
			return ctrl.Result{}, err
		}
		r.written.Remember(key, seen, what)
	}
	// One line per finished reconcile, as khai and the kube-rs baseline log `reconciled`:
	// scripts/bench's restart phase counts the Caches each contender has confirmed from these.
	log.Info("reconciled")
	return ctrl.Result{}, nil
}

// applyConfigMap server-side applies the ConfigMap with a controller reference to the Cache,
// forcing ownership of the fields it sets (it is the controller of this object).
func (r *CacheReconciler) applyConfigMap(ctx context.Context, cache *benchv1.Cache, name string, data map[string]string) error {
	gvk := benchv1.GroupVersion.WithKind("Cache")
	cm := corev1ac.ConfigMap(name, cache.Namespace).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(gvk.GroupVersion().String()).
			WithKind(gvk.Kind).
			WithName(cache.Name).
			WithUID(cache.UID).
			WithController(true).
			WithBlockOwnerDeletion(true)).
		WithData(data)
	return r.Apply(ctx, cm, client.FieldOwner(FieldManager), client.ForceOwnership)
}

// configMapDiffers says whether the cached ConfigMap lacks something we apply: a data key with
// our value, or our controller ownerReference. Keys or owners someone else added are not ours to
// judge (the apply would not remove them either).
func configMapDiffers(exists bool, have *corev1.ConfigMap, want map[string]string, owner types.UID) bool {
	if !exists {
		return true
	}
	for k, v := range want {
		if got, ok := have.Data[k]; !ok || got != v {
			return true
		}
	}
	ref := metav1.GetControllerOfNoCopy(have)
	return ref == nil || ref.UID != owner
}

// SetupWithManager registers the controller: For Caches, Owns ConfigMaps, every other option at
// controller-runtime's default.
func (r *CacheReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&benchv1.Cache{}).
		Owns(&corev1.ConfigMap{}).
		Named("cache")
	if r.MaxConcurrentReconciles > 0 {
		b = b.WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles})
	}
	return b.Complete(r)
}
