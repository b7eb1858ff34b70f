//! The order tables are seeded in: parents before children, a cycle of
//! foreign keys broken at a key that may be NULL (filled in afterwards).

/// A foreign key between two different tables (by index).
#[derive(Debug, Clone)]
pub(super) struct Edge {
    pub(super) child: usize,
    pub(super) parent: usize,
    pub(super) constraint: String,
    /// NULLs can satisfy it, so a cycle can be broken here.
    pub(super) breakable: bool,
    /// Checked at commit (`DEFERRABLE`): a cycle of NOT NULL keys can be
    /// broken here inside one transaction.
    pub(super) deferrable: bool,
}

#[derive(Debug, Default)]
pub(super) struct Order {
    /// Table indexes, parents before children.
    pub(super) tables: Vec<usize>,
    /// Edges set aside to break cycles (their columns get NULL, or, when
    /// no column may be NULL, the child is seeded first and fails on it).
    pub(super) broken: Vec<usize>,
    pub(super) warnings: Vec<String>,
}

/// Parents before children (Kahn's algorithm, ties by name order). A cycle
/// is broken at a foreign key NULLs satisfy; one with no such key is a
/// warning naming a constraint of the cycle, and is broken there anyway so
/// the rest of the schema is still seeded.
pub(super) fn seeding_order(tables: &[String], edges: &[Edge]) -> Order {
    let mut out = Order::default();
    let mut done = vec![false; tables.len()];
    let mut removed = vec![false; edges.len()];
    while out.tables.len() < tables.len() {
        let ready = (0..tables.len()).find(|&t| {
            !done[t]
                && !edges
                    .iter()
                    .enumerate()
                    .any(|(e, edge)| !removed[e] && edge.child == t && !done[edge.parent])
        });
        if let Some(t) = ready {
            done[t] = true;
            out.tables.push(t);
            continue;
        }
        // Only a key on a cycle is set aside: one from a table outside
        // it (an alert pointing at either side) would be left NULL for
        // nothing.
        let pending: Vec<usize> = (0..edges.len())
            .filter(|&e| !removed[e] && !done[edges[e].child] && !done[edges[e].parent])
            .filter(|&e| on_a_cycle(e, edges, &removed, &done))
            .collect();
        let Some(&pick) = pending
            .iter()
            .find(|&&e| edges[e].breakable)
            .or_else(|| pending.iter().find(|&&e| edges[e].deferrable))
            .or_else(|| pending.first())
        else {
            break; // unreachable: a stuck order always has a pending edge
        };
        let e = &edges[pick];
        if !e.breakable && !e.deferrable {
            out.warnings.push(format!(
                "foreign-key cycle: constraint {} ({} → {}) has no nullable column to break it; {} is seeded before {} and its rows cannot reference it",
                e.constraint, tables[e.child], tables[e.parent], tables[e.child], tables[e.parent]
            ));
        }
        removed[pick] = true;
        out.broken.push(pick);
    }
    out
}

/// Whether edge `e` closes a cycle of the edges still in place: its child
/// is reached from its parent by following keys to their parents.
fn on_a_cycle(e: usize, edges: &[Edge], removed: &[bool], done: &[bool]) -> bool {
    let target = edges[e].child;
    let mut seen = vec![false; done.len()];
    let mut stack = vec![edges[e].parent];
    while let Some(t) = stack.pop() {
        if t == target {
            return true;
        }
        if std::mem::replace(&mut seen[t], true) {
            continue;
        }
        stack.extend(
            edges
                .iter()
                .enumerate()
                .filter(|&(k, edge)| !removed[k] && edge.child == t && !done[edge.parent])
                .map(|(_, edge)| edge.parent),
        );
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(child: usize, parent: usize, name: &str, breakable: bool) -> Edge {
        Edge {
            child,
            parent,
            constraint: name.into(),
            breakable,
            deferrable: false,
        }
    }

    #[test]
    fn parents_come_before_children() {
        let names = ["a", "b", "c"].map(String::from);
        // a → b → c (a references b, b references c)
        let o = seeding_order(
            &names,
            &[edge(0, 1, "a_b", false), edge(1, 2, "b_c", false)],
        );
        assert_eq!(o.tables, [2, 1, 0]);
        assert!(o.broken.is_empty() && o.warnings.is_empty());
    }

    #[test]
    fn a_cycle_breaks_at_a_nullable_key_else_warns_with_its_name() {
        let names = ["a", "b", "c"].map(String::from);
        let edges = [
            edge(0, 1, "a_b", false),
            edge(1, 0, "b_a", true),
            edge(2, 0, "c_a", false),
        ];
        let o = seeding_order(&names, &edges);
        assert_eq!(o.broken, [1]);
        assert!(o.warnings.is_empty());
        let pos = |t| o.tables.iter().position(|&x| x == t).unwrap();
        assert!(pos(1) < pos(0) && pos(0) < pos(2), "{:?}", o.tables);

        // A table pointing at both sides of a cycle (nullable keys, the
        // first edges listed) is no part of it: its keys stay in place.
        let edges = [
            edge(2, 0, "c_a", true),
            edge(2, 1, "c_b", true),
            edge(0, 1, "a_b", false),
            edge(1, 0, "b_a", true),
        ];
        let o = seeding_order(&names, &edges);
        assert_eq!(o.broken, [3]);
        assert_eq!(o.tables.last(), Some(&2));

        let o = seeding_order(
            &names[..2],
            &[edge(0, 1, "a_b", false), edge(1, 0, "b_a", false)],
        );
        assert_eq!(o.tables.len(), 2);
        assert_eq!(o.warnings.len(), 1);
        assert!(o.warnings[0].contains("a_b"), "{}", o.warnings[0]);
    }
}
