package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TickerSpec is the desired state of a Ticker: nothing the timer reads.
type TickerSpec struct {
	Note string `json:"note,omitempty"`
}

// TickerStatus counts the timer's runs.
type TickerStatus struct {
	Ticks int64 `json:"ticks,omitempty"`
}

// Ticker is the timer workload's custom resource.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
type Ticker struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TickerSpec   `json:"spec,omitempty"`
	Status TickerStatus `json:"status,omitempty"`
}

// TickerList is a list of Tickers.
//
// +kubebuilder:object:root=true
type TickerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Ticker `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Ticker{}, &TickerList{})
}
