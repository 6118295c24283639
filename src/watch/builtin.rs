//! The kinds every Kubernetes API server serves, with their scope, for when khai must know a
//! kind without asking a cluster (`khai test`, `khai check`). At run time discovery decides.

/// `(group, kind)` of the cluster-scoped built-in kinds; every other built-in kind below is
/// namespaced.
const CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "ComponentStatus"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("networking.k8s.io", "IngressClass"),
    ("policy", "PodSecurityPolicy"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
];

/// `(group, kind)` of the namespaced built-in kinds operators commonly create or read.
const NAMESPACED: &[(&str, &str)] = &[
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "Service"),
    ("", "ServiceAccount"),
    ("", "Pod"),
    ("", "PersistentVolumeClaim"),
    ("", "Endpoints"),
    ("", "Event"),
    ("", "LimitRange"),
    ("", "ResourceQuota"),
    ("", "ReplicationController"),
    ("", "PodTemplate"),
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
    ("apps", "ReplicaSet"),
    ("apps", "ControllerRevision"),
    ("batch", "Job"),
    ("batch", "CronJob"),
    ("autoscaling", "HorizontalPodAutoscaler"),
    ("policy", "PodDisruptionBudget"),
    ("networking.k8s.io", "Ingress"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("coordination.k8s.io", "Lease"),
    ("events.k8s.io", "Event"),
    ("discovery.k8s.io", "EndpointSlice"),
];

/// Whether the built-in kind `kind` of `group` is namespaced; `None` when it is not one khai
/// knows. `group` is `None` when the kind was written without one (`ConfigMap`).
pub fn namespaced(group: Option<&str>, kind: &str) -> Option<bool> {
    let matches = |(g, k): &&(&str, &str)| *k == kind && group.is_none_or(|group| group == *g);
    if CLUSTER_SCOPED.iter().any(|e| matches(&e)) {
        Some(false)
    } else if NAMESPACED.iter().any(|e| matches(&e)) {
        Some(true)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_kinds_know_their_scope() {
        assert_eq!(namespaced(Some(""), "ConfigMap"), Some(true));
        assert_eq!(namespaced(None, "Namespace"), Some(false));
        assert_eq!(
            namespaced(Some("rbac.authorization.k8s.io"), "ClusterRole"),
            Some(false)
        );
        assert_eq!(namespaced(Some("apps"), "ConfigMap"), None, "wrong group");
        assert_eq!(namespaced(None, "Widget"), None);
    }
}
