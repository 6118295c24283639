package v1

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	examplesv1 "khai.test/benches/controller-runtime-baseline/api/examples/v1"
)

// review is the AdmissionReview scripts/bench-webhook sends (benches/webhook-review.json): a
// CREATE of a valid v1 Cache.
func review(t *testing.T) []byte {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "webhook-review.json"))
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// serve posts body to the webhook built by with and returns the decoded answer.
func serve(t *testing.T, hook *admission.Webhook, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	hook.ServeHTTP(rec, req)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("answer %q: %v", rec.Body.String(), err)
	}
	if out.Response == nil {
		t.Fatalf("no response in %q", rec.Body.String())
	}
	return out.Response
}

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// The bench's review gets the two annotations khai's example script adds, as a JSON Patch.
func TestMutateAddsOwnerAndLastWriter(t *testing.T) {
	resp := serve(t, admission.WithDefaulter(scheme(t), &CacheCustomDefaulter{}), review(t))
	if !resp.Allowed {
		t.Fatalf("not allowed: %+v", resp.Result)
	}
	var patch []map[string]any
	if err := json.Unmarshal(resp.Patch, &patch); err != nil {
		t.Fatalf("patch %q: %v", resp.Patch, err)
	}
	if len(patch) != 1 || patch[0]["op"] != "add" || patch[0]["path"] != "/metadata/annotations" {
		t.Fatalf("patch %s", resp.Patch)
	}
	want := map[string]any{OwnerAnnotation: "admin", LastUpdatedByAnnotation: "admin"}
	got, _ := patch[0]["value"].(map[string]any)
	if len(got) != len(want) || got[OwnerAnnotation] != "admin" || got[LastUpdatedByAnnotation] != "admin" {
		t.Errorf("annotations %v, want %v", got, want)
	}
}

// The bench's review is allowed; a version its image does not allow is denied with khai's words.
func TestValidateChecksTheVersionAllowList(t *testing.T) {
	hook := admission.WithValidator(scheme(t), &CacheCustomValidator{})
	if resp := serve(t, hook, review(t)); !resp.Allowed {
		t.Fatalf("the bench's review was denied: %+v", resp.Result)
	}
	bad := strings.Replace(string(review(t)), `"version":"7.2"`, `"version":"8.0"`, 1)
	resp := serve(t, hook, []byte(bad))
	if resp.Allowed {
		t.Fatal("redis 8.0 was allowed")
	}
	want := `spec.version "8.0" is not allowed for redis (allowed: 7.2, 7.4)`
	if resp.Result == nil || resp.Result.Message != want {
		t.Errorf("message %+v, want %q", resp.Result, want)
	}
}

// A Cache naming no version is allowed whatever its image.
func TestValidateAllowsNoVersion(t *testing.T) {
	c := &examplesv1.Cache{Spec: examplesv1.CacheSpec{Image: "memcached"}}
	if err := validateVersion(c); err != nil {
		t.Error(err)
	}
}
