// The cache-bench workload (and the timer workload, and examples/cache's admission webhook)
// written the way Kubebuilder's book teaches, on controller-runtime: the Go contender
// scripts/bench compares khai with (docs/benchmarks.md).
// The layout and flags follow Kubebuilder's scaffold (cmd/main.go); manager and controller
// options stay at controller-runtime's defaults: no client-side rate limit (ctrl.GetConfigOrDie
// sets QPS to -1), one reconcile at a time per controller, no leader election.
package main

import (
	"crypto/tls"
	"flag"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	benchv1 "khai.test/benches/controller-runtime-baseline/api/v1"
	"khai.test/benches/controller-runtime-baseline/internal/controller"
	webhookv1 "khai.test/benches/controller-runtime-baseline/internal/webhook/v1"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(benchv1.AddToScheme(scheme))
	utilruntime.Must(webhookv1.AddToScheme(scheme))
}

func main() {
	var metricsAddr, probeAddr, workload string
	var webhookCertPath, webhookHost string
	var enableLeaderElection, enableHTTP2 bool
	var concurrency, webhookPort int
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0",
		"The address the metrics endpoint binds to, or 0 to disable the metrics service.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", "0",
		"The address the probe endpoint binds to, or 0 to disable it.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false,
		"Enable leader election for controller manager.")
	flag.StringVar(&workload, "workload", "cache",
		"cache: reconcile Caches (cache-bench); timer: tick Tickers every BENCH_TIMER_INTERVAL seconds; "+
			"webhook: serve examples/cache's Cache admission webhook (scripts/bench webhook).")
	flag.IntVar(&concurrency, "max-concurrent-reconciles", 0,
		"Reconciles at once per controller; 0 keeps controller-runtime's default (1).")
	flag.StringVar(&webhookCertPath, "webhook-cert-path", "",
		"The directory that contains the webhook certificate (tls.crt and tls.key).")
	flag.StringVar(&webhookHost, "webhook-host", "", "The address the webhook server listens on; empty for all.")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "The port the webhook server listens on.")
	flag.BoolVar(&enableHTTP2, "enable-http2", false,
		"If set, HTTP/2 will be enabled for the metrics and webhook servers")
	opts := loggerOptions()
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	// As Kubebuilder's scaffold: HTTP/2 off unless asked for (its rapid-reset and stream
	// cancellation CVEs), the certificate from a directory.
	var tlsOpts []func(*tls.Config)
	if !enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	webhookServer := webhook.NewServer(webhook.Options{
		Host:    webhookHost,
		Port:    webhookPort,
		CertDir: webhookCertPath,
		TLSOpts: tlsOpts,
	})

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		WebhookServer:          webhookServer,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         enableLeaderElection,
		LeaderElectionID:       "controller-runtime-baseline.bench.khai.dev",
	})
	if err != nil {
		setupLog.Error(err, "unable to start manager")
		os.Exit(1)
	}

	switch workload {
	case "cache":
		err = (&controller.CacheReconciler{
			Client:                  mgr.GetClient(),
			Scheme:                  mgr.GetScheme(),
			MaxConcurrentReconciles: concurrency,
		}).SetupWithManager(mgr)
	case "timer":
		interval, perr := timerInterval()
		if perr != nil {
			setupLog.Error(perr, "BENCH_TIMER_INTERVAL")
			os.Exit(1)
		}
		err = (&controller.TickerReconciler{
			Client:                  mgr.GetClient(),
			Interval:                interval,
			MaxConcurrentReconciles: concurrency,
		}).SetupWithManager(mgr)
	case "webhook":
		err = webhookv1.SetupCacheWebhookWithManager(mgr)
	default:
		setupLog.Info("unknown --workload (cache, timer or webhook)", "workload", workload)
		os.Exit(2)
	}
	if err != nil {
		setupLog.Error(err, "unable to create controller", "workload", workload)
		os.Exit(1)
	}

	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up ready check")
		os.Exit(1)
	}

	setupLog.Info("starting manager", "workload", workload)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "problem running manager")
		os.Exit(1)
	}
}

// loggerOptions are the scaffold's: zap in development mode (console lines, debug by default,
// never sampled). scripts/bench passes --zap-log-level=info, the level it runs every contender
// at, and counts each Cache's `reconciled` line on restart; production mode's sampling (the first
// 100 lines with one message each second, then every 100th) would drop most of them.
func loggerOptions() zap.Options {
	return zap.Options{
		Development: true,
	}
}

// timerInterval is BENCH_TIMER_INTERVAL (seconds, default 10), which scripts/bench sets for the
// timer workload as it does for Kopf.
func timerInterval() (time.Duration, error) {
	s := os.Getenv("BENCH_TIMER_INTERVAL")
	if s == "" {
		return 10 * time.Second, nil
	}
	d, err := time.ParseDuration(s + "s")
	if err != nil {
		return 0, err
	}
	return d, nil
}
