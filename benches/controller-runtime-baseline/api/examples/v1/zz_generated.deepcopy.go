// Code in the form controller-gen's object generator writes (`controller-gen object`), kept by
// hand so building the benchmark needs no code generator.

package v1

import (
	"k8s.io/apimachinery/pkg/runtime"
)

// DeepCopyInto copies the receiver into out.
func (in *CacheResources) DeepCopyInto(out *CacheResources) {
	*out = *in
	out.Requests = copyMap(in.Requests)
	out.Limits = copyMap(in.Limits)
}

func copyMap(in map[string]string) map[string]string {
	if in == nil {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

func copyPtr[T any](in *T) *T {
	if in == nil {
		return nil
	}
	out := *in
	return &out
}

// DeepCopyInto copies the receiver into out.
func (in *CacheSpec) DeepCopyInto(out *CacheSpec) {
	*out = *in
	out.DesiredSize = copyPtr(in.DesiredSize)
	out.Version = copyPtr(in.Version)
	out.Size = copyPtr(in.Size)
	if in.Resources != nil {
		out.Resources = new(CacheResources)
		in.Resources.DeepCopyInto(out.Resources)
	}
}

// DeepCopyInto copies the receiver into out.
func (in *CacheStatus) DeepCopyInto(out *CacheStatus) {
	*out = *in
	out.CurrentSize = copyPtr(in.CurrentSize)
}

// DeepCopyInto copies the receiver into out.
func (in *Cache) DeepCopyInto(out *Cache) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	in.Status.DeepCopyInto(&out.Status)
}

// DeepCopy copies the receiver into a new Cache.
func (in *Cache) DeepCopy() *Cache {
	if in == nil {
		return nil
	}
	out := new(Cache)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject copies the receiver into a new runtime.Object.
func (in *Cache) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies the receiver into out.
func (in *CacheList) DeepCopyInto(out *CacheList) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		in, out := &in.Items, &out.Items
		*out = make([]Cache, len(*in))
		for i := range *in {
			(*in)[i].DeepCopyInto(&(*out)[i])
		}
	}
}

// DeepCopy copies the receiver into a new CacheList.
func (in *CacheList) DeepCopy() *CacheList {
	if in == nil {
		return nil
	}
	out := new(CacheList)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject copies the receiver into a new runtime.Object.
func (in *CacheList) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}
