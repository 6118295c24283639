// Package v1 is the admission webhook of examples/cache's Cache written the way Kubebuilder
// scaffolds one (`kubebuilder create webhook --defaulting --programmatic-validation`): a
// Defaulter and a Validator for the typed Cache, wired with ctrl.NewWebhookManagedBy. It does
// what examples/cache/scripts/webhooks.rhai does, so `scripts/bench webhook` can measure both
// serving the same reviews (docs/benchmarks.md).
package v1

import (
	"context"
	"fmt"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	examplesv1 "khai.test/benches/controller-runtime-baseline/api/examples/v1"
)

// The paths khai serves examples/cache's webhook functions on; the same here so one load
// generator drives both contenders alike.
const (
	MutatePath   = "/mutate/cache"
	ValidatePath = "/validate/cache"
)

// The annotations the defaulter records who created and who last wrote a Cache in.
const (
	OwnerAnnotation         = "examples.khai.dev/owner"
	LastUpdatedByAnnotation = "examples.khai.dev/lastUpdatedBy"
)

// SetupCacheWebhookWithManager registers the Cache's defaulting and validating webhooks with the
// manager's webhook server.
func SetupCacheWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &examplesv1.Cache{}).
		WithDefaulter(&CacheCustomDefaulter{}).
		WithDefaulterCustomPath(MutatePath).
		WithValidator(&CacheCustomValidator{}).
		WithValidatorCustomPath(ValidatePath).
		Complete()
}

// CacheCustomDefaulter records in annotations who created a Cache and who wrote it last.
type CacheCustomDefaulter struct{}

var _ admission.Defaulter[*examplesv1.Cache] = &CacheCustomDefaulter{}

// Default sets the owner annotation on create and the last writer's on every write.
func (d *CacheCustomDefaulter) Default(ctx context.Context, cache *examplesv1.Cache) error {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return fmt.Errorf("no admission request in the context: %w", err)
	}
	user := req.UserInfo.Username
	if cache.Annotations == nil {
		cache.Annotations = map[string]string{}
	}
	if req.Operation == admissionv1.Create {
		cache.Annotations[OwnerAnnotation] = user
	}
	cache.Annotations[LastUpdatedByAnnotation] = user
	return nil
}

// CacheCustomValidator checks a Cache's server version against the allow-list of its image.
type CacheCustomValidator struct{}

var _ admission.Validator[*examplesv1.Cache] = &CacheCustomValidator{}

// ValidateCreate checks a new Cache.
func (v *CacheCustomValidator) ValidateCreate(_ context.Context, cache *examplesv1.Cache) (admission.Warnings, error) {
	return nil, validateVersion(cache)
}

// ValidateUpdate checks the Cache as it would be after the update.
func (v *CacheCustomValidator) ValidateUpdate(_ context.Context, _, cache *examplesv1.Cache) (admission.Warnings, error) {
	return nil, validateVersion(cache)
}

// ValidateDelete allows every delete.
func (v *CacheCustomValidator) ValidateDelete(context.Context, *examplesv1.Cache) (admission.Warnings, error) {
	return nil, nil
}

// allowedVersions are the server versions examples/cache may run, per image.
func allowedVersions(image string) []string {
	switch image {
	case "redis":
		return []string{"7.2", "7.4"}
	case "valkey":
		return []string{"8.0", "8.1"}
	default:
		return nil
	}
}

// validateVersion denies a version its image does not allow; a Cache naming none is allowed.
func validateVersion(cache *examplesv1.Cache) error {
	if cache.Spec.Version == nil {
		return nil
	}
	allowed := allowedVersions(cache.Spec.Image)
	if slices.Contains(allowed, *cache.Spec.Version) {
		return nil
	}
	return fmt.Errorf("spec.version %q is not allowed for %s (allowed: %s)",
		*cache.Spec.Version, cache.Spec.Image, strings.Join(allowed, ", "))
}

// AddToScheme registers the types the webhook decodes.
func AddToScheme(s *runtime.Scheme) error {
	return examplesv1.AddToScheme(s)
}
