//! Every NATS name a cluster uses, derived in one place from its name (`--cluster-name`,
//! default [`DEFAULT_CLUSTER_NAME`]): the KV buckets, the log stream and every subject. Two
//! clusters with different names share one NATS account without seeing each other: nothing
//! one subscribes to, watches or reads is written by the other. The default name gives the
//! names clusters had before the flag (`rt_registry`, `RT_LOG`, `rt.log.<id>`, …), so an
//! existing cluster keeps its data.
//!
//! Cluster names are case-insensitive (`ONE` is `one`): the stream name is the upper-case
//! form, and everything else the lower-case one, so each name has its own stream.
//!
//! Who talks to it: [`Cluster`](super::Cluster) builds one at connect and hands it out
//! ([`Cluster::names`](super::Cluster::names)) to the registry, lease, search, counts and log
//! stream code and to the transport's relays.

use crate::ids::ConversationId;

/// The cluster name when `--cluster-name` does not say: the names of a cluster from before
/// the flag existed.
pub const DEFAULT_CLUSTER_NAME: &str = "rt";
/// Longest cluster name (it prefixes bucket, stream and subject names).
pub const MAX_CLUSTER_NAME: usize = 32;

/// The buckets, stream and subjects of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// The cluster name, lower case: the prefix of buckets and subjects.
    prefix: String,
}

impl Default for Names {
    fn default() -> Names {
        Names::new(DEFAULT_CLUSTER_NAME).expect("the default name is valid")
    }
}

impl Names {
    /// The names of cluster `name` (checked by [`Names::validate`]).
    pub fn new(name: &str) -> Result<Names, String> {
        Names::validate(name)?;
        Ok(Names {
            prefix: name.to_ascii_lowercase(),
        })
    }

    /// A cluster name is 1 to [`MAX_CLUSTER_NAME`] of `[A-Za-z0-9_-]`: what KV bucket names,
    /// stream names and subject tokens all accept. The error says what is wrong, without the
    /// name.
    pub fn validate(name: &str) -> Result<(), String> {
        if name.is_empty() || name.len() > MAX_CLUSTER_NAME {
            return Err(format!("must be 1 to {MAX_CLUSTER_NAME} characters long"));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err("may contain only letters, digits, '-' and '_'".into());
        }
        Ok(())
    }

    /// The cluster name (lower case).
    pub fn cluster(&self) -> &str {
        &self.prefix
    }

    /// The registry's KV bucket (`rt_registry`).
    pub fn registry_bucket(&self) -> String {
        format!("{}_registry", self.prefix)
    }

    /// The ownership leases' KV bucket (`rt_owners`).
    pub fn owners_bucket(&self) -> String {
        format!("{}_owners", self.prefix)
    }

    /// The KV bucket of live nodes (`rt_nodes`).
    pub fn nodes_bucket(&self) -> String {
        format!("{}_nodes", self.prefix)
    }

    /// The stream of conversation files (`RT_LOG`).
    pub fn log_stream(&self) -> String {
        format!("{}_LOG", self.prefix.to_ascii_uppercase())
    }

    /// The subject of one conversation's records in the log stream (`rt.log.<id>`).
    pub fn log_subject(&self, id: ConversationId) -> String {
        format!("{}.log.{id}", self.prefix)
    }

    /// Every subject of the log stream (`rt.log.>`).
    pub fn log_subjects(&self) -> String {
        format!("{}.log.>", self.prefix)
    }

    /// Cross-node search requests (`rt.search`; every node subscribes).
    pub fn search_subject(&self) -> String {
        format!("{}.search", self.prefix)
    }

    /// Where owners share the client and message counts of their conversations (`rt.counts`;
    /// core NATS: a lost update is only a stale count until the next one).
    pub fn counts_subject(&self) -> String {
        format!("{}.counts", self.prefix)
    }

    /// Requests to `node` for a relay (`rt.node.<node>.relay.open`).
    pub fn relay_open(&self, node: &str) -> String {
        format!("{}.node.{node}.relay.open", self.prefix)
    }

    /// A relay's frames to `node`, the conversation's owner (`rt.node.<node>.relay.<relay>.in`).
    pub fn relay_in(&self, node: &str, relay: &str) -> String {
        format!("{}.node.{node}.relay.{relay}.in", self.prefix)
    }

    /// The frames of every relay of one link back to `node`, the clients' node
    /// (`rt.node.<node>.link.<link>.out`: relays are per node and conversation).
    pub fn relay_link(&self, node: &str, link: &str) -> String {
        format!("{}.node.{node}.link.{link}.out", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default name gives exactly the names of clusters from before `--cluster-name`.
    #[test]
    fn the_default_keeps_the_old_names() {
        let names = Names::default();
        let id = ConversationId::parse("0b6a3d3e-8d4b-4a57-9a0e-3c2b1f0a9e11").unwrap();
        assert_eq!(names.registry_bucket(), "rt_registry");
        assert_eq!(names.owners_bucket(), "rt_owners");
        assert_eq!(names.nodes_bucket(), "rt_nodes");
        assert_eq!(names.log_stream(), "RT_LOG");
        assert_eq!(names.log_subject(id), format!("rt.log.{id}"));
        assert_eq!(names.log_subjects(), "rt.log.>");
        assert_eq!(names.search_subject(), "rt.search");
        assert_eq!(names.counts_subject(), "rt.counts");
        assert_eq!(names.relay_open("a"), "rt.node.a.relay.open");
        assert_eq!(names.relay_in("a", "r"), "rt.node.a.relay.r.in");
        assert_eq!(names.relay_link("b", "l"), "rt.node.b.link.l.out");
    }

    /// Another name prefixes everything; case does not make another cluster.
    #[test]
    fn a_name_prefixes_everything() {
        let names = Names::new("Blue-2").unwrap();
        assert_eq!(names.registry_bucket(), "blue-2_registry");
        assert_eq!(names.log_stream(), "BLUE-2_LOG");
        assert_eq!(names.search_subject(), "blue-2.search");
        assert_eq!(names.relay_open("n"), "blue-2.node.n.relay.open");
        assert_eq!(Names::new("blue-2").unwrap(), names);
        assert_ne!(
            Names::new("blue_2").unwrap().log_stream(),
            names.log_stream()
        );
    }

    #[test]
    fn bad_names_are_refused() {
        assert!(Names::new("").is_err());
        assert!(Names::new(&"x".repeat(33)).is_err());
        assert!(Names::new(&"x".repeat(32)).is_ok());
        for bad in ["a.b", "a*", "a>", "a b", "é"] {
            assert!(Names::new(bad).is_err(), "{bad}");
        }
    }
}
