//! The rules of one Role or ClusterRole: verbs per (api group, resource, resource names), and
//! the non-resource URLs, kept sorted so `khai generate` prints the same output every time.

use crate::config::model::RbacRule;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// Verbs per (api group, resource, resource names), kept sorted so output is stable.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Rules {
    rules: BTreeMap<(String, String, Vec<String>), BTreeSet<String>>,
    urls: BTreeSet<String>,
}

impl Rules {
    pub(super) fn add(&mut self, group: &str, resource: &str, verbs: &[&str]) {
        self.add_named(group, resource, &[], verbs);
    }

    pub(super) fn add_named(
        &mut self,
        group: &str,
        resource: &str,
        names: &[String],
        verbs: &[&str],
    ) {
        self.rules
            .entry((group.into(), resource.into(), names.to_vec()))
            .or_default()
            .extend(verbs.iter().map(|v| v.to_string()));
    }

    /// Adds every rule and URL of `other`.
    pub(super) fn extend(&mut self, other: &Rules) {
        for (k, v) in &other.rules {
            self.rules
                .entry(k.clone())
                .or_default()
                .extend(v.iter().cloned());
        }
        self.urls.extend(other.urls.iter().cloned());
    }

    /// Adds the verbs of an `extra_rbac` rule on each of its groups and resources.
    pub(super) fn add_extra(&mut self, r: &RbacRule) {
        for g in &r.api_groups {
            for res in &r.resources {
                self.add_rule_of(r, g, res);
            }
        }
    }

    /// Adds the verbs of `extra_rbac` rule `r` on one of its groups and resources.
    pub(super) fn add_rule_of(&mut self, r: &RbacRule, group: &str, resource: &str) {
        let verbs: Vec<&str> = r.verbs.iter().map(String::as_str).collect();
        self.add_named(group, resource, &r.resource_names, &verbs);
    }

    /// Grants `get` on a non-resource URL (discovery).
    pub(super) fn add_url(&mut self, url: &str) {
        self.urls.insert(url.into());
    }

    /// These rules with only `verbs` left (rules left with none go); URLs are kept.
    pub(super) fn only(&self, verbs: &[&str]) -> Rules {
        let rules = self
            .rules
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.iter()
                        .filter(|x| verbs.contains(&x.as_str()))
                        .cloned()
                        .collect::<BTreeSet<_>>(),
                )
            })
            .filter(|(_, v)| !v.is_empty())
            .collect();
        Rules {
            rules,
            urls: self.urls.clone(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.urls.is_empty()
    }

    /// The verbs granted on `resource` in `group`, over every set of resource names.
    #[cfg(test)]
    pub(super) fn verbs(&self, group: &str, resource: &str) -> Vec<String> {
        self.rules
            .iter()
            .filter(|((g, r, _), _)| g == group && r == resource)
            .flat_map(|(_, v)| v.iter().cloned())
            .collect()
    }

    /// Whether `get` on non-resource URL `url` is granted.
    #[cfg(test)]
    pub(super) fn has_url(&self, url: &str) -> bool {
        self.urls.contains(url)
    }

    /// The PolicyRules, one per resource, sorted by group then resource.
    pub(crate) fn policy_rules(&self) -> Vec<Value> {
        let mut out: Vec<Value> = self
            .rules
            .iter()
            .map(|((group, resource, names), verbs)| {
                let mut r = json!({
                    "apiGroups": [group],
                    "resources": [resource],
                    "verbs": verbs.iter().collect::<Vec<_>>(),
                });
                if !names.is_empty() {
                    r["resourceNames"] = json!(names);
                }
                r
            })
            .collect();
        if !self.urls.is_empty() {
            out.push(json!({
                "nonResourceURLs": self.urls.iter().collect::<Vec<_>>(),
                "verbs": ["get"],
            }));
        }
        out
    }
}
