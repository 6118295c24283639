// Package v1 contains the examples.khai.dev/v1 Cache of examples/cache, the object whose
// admission webhook `scripts/bench webhook` measures: the controller-runtime webhook contender
// decodes reviews into it. Only the fields the webhook reads or writes matter; the CRD is
// examples/cache's, and nothing here generates one.
//
// +kubebuilder:object:generate=true
// +groupName=examples.khai.dev
package v1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the objects in this package.
	GroupVersion = schema.GroupVersion{Group: "examples.khai.dev", Version: "v1"}

	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
