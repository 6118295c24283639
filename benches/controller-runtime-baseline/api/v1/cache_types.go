package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CacheSpec is the desired state of a Cache.
type CacheSpec struct {
	Size  int64  `json:"size"`
	Image string `json:"image"`
}

// CacheStatus is what the controller last made of a Cache.
type CacheStatus struct {
	Phase              string `json:"phase,omitempty"`
	ConfigMap          string `json:"configMap,omitempty"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
}

// Cache is the cache-bench custom resource.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
type Cache struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   CacheSpec   `json:"spec,omitempty"`
	Status CacheStatus `json:"status,omitempty"`
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
