//! The user-facing documents say what the code does: README.md's table of
//! checks lists the check registry, and every place a user picks a layout
//! (README, the GitHub Action's `layout` input, the GitLab component's
//! `layout` options) lists every layout rollsafe reads. Both drifted
//! before (a check table missing a check; a component that offered three
//! of ten layouts), so a change to the registry or to the layouts fails
//! here until the documents follow.

use crate::catalog::Layout;

/// A document of the repository, read when the test runs (the Action and
/// the component are not part of the crate's package, so they cannot be
/// compiled in).
fn document(path: &str) -> String {
    let at = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&at).unwrap_or_else(|e| panic!("reading {}: {e}", at.display()))
}

/// The first column of README's `| check | proves (measured) |` table.
fn readme_checks() -> Vec<String> {
    let readme = document("README.md");
    let table = readme
        .split_once("| check | proves (measured) |")
        .expect("README.md has its table of checks")
        .1;
    table
        .lines()
        .skip(2) // the rest of the header line and `|---|---|`
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('|').nth(1))
        .map(|cell| cell.trim().trim_matches('`').to_string())
        .collect()
}

#[test]
fn the_readmes_check_table_is_the_registry() {
    let mut registry: Vec<String> = crate::verify::checks::ALL
        .iter()
        .map(|c| c.name.to_string())
        .chain([crate::dao::check::CHECK.to_string()])
        .collect();
    registry.sort();
    registry.dedup();
    let mut readme = readme_checks();
    assert!(!readme.is_empty(), "no rows read from README's check table");
    readme.sort();
    assert_eq!(
        readme, registry,
        "README.md's table of checks and the registry (src/verify/checks/mod.rs, plus the shipped project's dao check) differ"
    );
}

#[test]
fn every_layout_is_offered_wherever_a_user_picks_one() {
    let (readme, action, component) = (
        document("README.md"),
        document("action.yml"),
        document("templates/rollsafe.yml"),
    );
    let option_line = component
        .lines()
        .skip_while(|l| l.trim() != "layout:")
        .find(|l| l.trim_start().starts_with("options:"))
        .expect("the component's layout input has options");
    let action_layout = action
        .split_once("\n  layout:")
        .expect("the Action has a layout input")
        .1
        .lines()
        .find(|l| l.trim_start().starts_with("description:"))
        .expect("its description");
    let readme_flag = readme
        .lines()
        .find(|l| l.starts_with("| `--layout L` |"))
        .expect("README's --layout row");
    for layout in Layout::ALL {
        let name = layout.as_str();
        let word = |text: &str| {
            text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .any(|w| w == name)
        };
        assert!(
            word(option_line),
            "the GitLab component's layout options lack {name}: {option_line}"
        );
        assert!(
            word(action_layout),
            "the Action's layout input lacks {name}: {action_layout}"
        );
        assert!(
            word(readme_flag),
            "README's --layout row lacks {name}: {readme_flag}"
        );
    }
}
