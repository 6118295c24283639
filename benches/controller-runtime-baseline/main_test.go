package main

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Every `reconciled` line reaches the log however fast they come, at the level scripts/bench
// runs the baseline at, and debug lines do not: the restart phase counts one line per Cache.
func TestEveryReconciledLineIsLoggedAtInfo(t *testing.T) {
	opts := loggerOptions()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	opts.BindFlags(fs)
	if err := fs.Parse([]string{"--zap-log-level=info"}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	log := zap.New(zap.UseFlagOptions(&opts), zap.WriteTo(&out))
	const n = 1000
	for i := 0; i < n; i++ {
		log.Info("reconciled", "name", "c-00001")
		log.V(1).Info("patching status")
	}
	if got := strings.Count(out.String(), "\treconciled\t"); got != n {
		t.Errorf("%d reconciled lines logged, want %d", got, n)
	}
	if strings.Contains(out.String(), "patching status") {
		t.Error("a debug line was logged at info")
	}
}
