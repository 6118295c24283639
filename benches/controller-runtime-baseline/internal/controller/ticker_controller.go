package controller

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	benchv1 "khai.test/benches/controller-runtime-baseline/api/v1"
)

// TickerReconciler is the timer workload: every Interval, each Ticker's status.ticks goes up by
// one. controller-runtime has no timers; a reconcile that returns RequeueAfter is its periodic
// work, the first run as soon as the Ticker is seen, the next Interval after each run ends (as
// Kopf's timer and khai's do).
type TickerReconciler struct {
	client.Client
	Interval time.Duration
	// MaxConcurrentReconciles, when above 0, overrides controller-runtime's default (1).
	MaxConcurrentReconciles int
}

// +kubebuilder:rbac:groups=bench.khai.dev,resources=tickers,verbs=get;list;watch
// +kubebuilder:rbac:groups=bench.khai.dev,resources=tickers/status,verbs=get;update;patch

// Reconcile ticks once and asks to be called again after Interval.
func (r *TickerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var t benchv1.Ticker
	if err := r.Get(ctx, req.NamespacedName, &t); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	orig := t.DeepCopy()
	t.Status.Ticks++
	if err := r.Status().Patch(ctx, &t, client.MergeFrom(orig), client.FieldOwner(FieldManager)); err != nil {
		return ctrl.Result{}, err
	}
	logf.FromContext(ctx).V(1).Info("ticked", "ticks", t.Status.Ticks)
	return ctrl.Result{RequeueAfter: r.Interval}, nil
}

// SetupWithManager registers the controller. Only generation changes (and the initial list)
// trigger a reconcile: without the predicate, the watch event of each status patch would tick
// again at once.
func (r *TickerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&benchv1.Ticker{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("ticker")
	if r.MaxConcurrentReconciles > 0 {
		b = b.WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles})
	}
	return b.Complete(r)
}
