// Package v1 contains the bench.khai.dev/v1 API types this controller reconciles: Cache (the
// cache-bench workload) and Ticker (the timer workload). The CRDs themselves come from
// `khai generate crds examples/bench-cache` and `examples/bench-timer`, installed by the
// benchmark driver, so every contender shares them; nothing here generates a CRD.
//
// +kubebuilder:object:generate=true
// +groupName=bench.khai.dev
package v1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the objects in this package.
	GroupVersion = schema.GroupVersion{Group: "bench.khai.dev", Version: "v1"}

	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
