package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CacheResources are the server container's resource requests and limits.
type CacheResources struct {
	Requests map[string]string `json:"requests,omitempty"`
	Limits   map[string]string `json:"limits,omitempty"`
}

// CacheSpec is the desired state of a Cache, as examples/cache's operator.toml declares it.
type CacheSpec struct {
	Image       string `json:"image,omitempty"`
	DesiredSize *int64 `json:"desired_size,omitempty"`
	// Version is checked against an allow-list per image by the validating webhook; nil when
	// the Cache does not name one.
	Version   *string         `json:"version,omitempty"`
	Size      *int64          `json:"size,omitempty"`
	Resources *CacheResources `json:"resources,omitempty"`
}

// CacheStatus is what the operator last made of a Cache.
type CacheStatus struct {
	Phase       string `json:"phase,omitempty"`
	CurrentSize *int64 `json:"current_size,omitempty"`
}

// Cache is examples/cache's custom resource: a Redis or Valkey server.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
type Cache struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   CacheSpec   `json:"spec,omitempty,omitzero"`
	Status CacheStatus `json:"status,omitempty,omitzero"`
}

// CacheList is a list of Caches.
//
// +kubebuilder:object:root=true
type CacheList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cache `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Cache{}, &CacheList{})
}
