//! PostgreSQL's pattern for indexing a partitioned table without blocking
//! its writers (ddl-partitioning, "Partition Maintenance"), as rollsafe
//! judges it: `CREATE INDEX … ON ONLY parent` makes the parent's index
//! alone — it has no file, builds nothing, stays invalid, and takes SHARE
//! on the parent only; `CREATE INDEX CONCURRENTLY` on each partition builds
//! the real ones; `ALTER INDEX parent_idx ATTACH PARTITION part_idx` ties
//! each to the parent (valid once all are attached), and running it again
//! on an attached index does nothing (checked on 15), so it is re-runnable
//! in a no-transaction file.

/// An index a statement created: (table oid, name, index oid, relfilenode).
pub type NewIndex = (u32, String, u32, u32);

/// The indexes among `indexes` that a statement built, of those not in
/// `before`: all of them, except a partitioned index made alone (`ON
/// ONLY`: no file, and no partition index with a file made with it). A
/// partitioned index made with its partitions' (plain `CREATE INDEX` on the
/// parent) counts as built: the build is on the parent's statement.
pub fn indexes_built(indexes: &[NewIndex], before: &[u32]) -> Vec<u32> {
    let new: Vec<&NewIndex> = indexes.iter().filter(|i| !before.contains(&i.2)).collect();
    let any_file = new.iter().any(|i| i.3 != 0);
    new.into_iter()
        .filter(|i| i.3 != 0 || any_file)
        .map(|i| i.2)
        .collect()
}

/// `ALTER INDEX parent_idx ATTACH PARTITION part_idx` (upper-case words).
pub fn attaches_an_index_partition(w: &[String]) -> bool {
    w.len() == 6 && w[0] == "ALTER" && w[1] == "INDEX" && w[3] == "ATTACH" && w[4] == "PARTITION"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_on_only_the_parent_builds_nothing() {
        let parent_alone = [(1, "p_idx".to_string(), 10, 0)];
        assert!(indexes_built(&parent_alone, &[]).is_empty());
        let with_partitions = [
            (1, "p_idx".to_string(), 10, 0),
            (2, "c_idx".to_string(), 11, 7001),
        ];
        assert_eq!(indexes_built(&with_partitions, &[]), [10, 11]);
        assert_eq!(
            indexes_built(&with_partitions, &[10, 11]),
            Vec::<u32>::new()
        );
        let words = |s: &str| {
            s.split_whitespace()
                .map(str::to_uppercase)
                .collect::<Vec<_>>()
        };
        assert!(attaches_an_index_partition(&words(
            "alter index b.p_idx attach partition b.c_idx"
        )));
        assert!(!attaches_an_index_partition(&words(
            "ALTER INDEX p_idx RENAME TO q_idx"
        )));
    }
}
