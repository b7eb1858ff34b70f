//! The docker backend: a PostgreSQL container through testcontainers.
//!
//! The image follows the official `postgres` image's contract
//! (POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB, port 5432, arguments
//! passed to `postgres`). Where a registry is reachable the official image is
//! pulled on first use; where none is, `ci/build-postgres-image.sh` builds an
//! equivalent image under the same name, and testcontainers uses a present
//! image as is. One code path serves both.
//!
//! The container is removed when the backend is dropped (testcontainers'
//! RAII handle), also on panic; it is listed in [`super::cleanup`] so a
//! SIGTERM or Ctrl-C removes it too, and labelled with its owner's pid and
//! host so the next run removes it when its owner was killed outright.

use std::process::Command;
use std::time::Duration;

use testcontainers::core::{Mount, WaitFor};
use testcontainers::runners::SyncRunner;
use testcontainers::{Container, ImageExt};
use testcontainers_modules::postgres::Postgres;

use super::cleanup::{self, Held, LABEL};
use super::{random_password, run_with_timeout, Backend, BackendKind, SandboxError};

/// Where the container's cluster lives: a tmpfs mount (see `start_with`).
const PGDATA: &str = "/var/lib/postgresql/rollsafe-data";

pub struct DockerBackend {
    image: String,
    admin_url: String,
    host_port: u16,
    // Dropping the container removes it (always Some until dropped).
    container: Option<Container<Postgres>>,
    _registration: cleanup::Registration,
}

/// `repo[:tag]` → (repo, tag); a port in a registry host is not a tag.
fn split_image(image: &str) -> (&str, &str) {
    match image.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo, tag),
        _ => (image, "latest"),
    }
}

/// The PostgreSQL major an image name claims by its tag: `postgres:17`,
/// `postgres:17.2-bookworm` → 17; `postgres`, `postgres:latest` → None.
/// Only a claim: a started sandbox checks what really runs.
pub fn image_major(image: &str) -> Option<u32> {
    let (_, tag) = split_image(image);
    let digits: String = tag.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Whether a Docker engine answers, as the `docker` CLI sees it.
fn engine_answers() -> Result<(), SandboxError> {
    let out = run_with_timeout(
        Command::new("docker").args(["info", "--format", "{{.ServerVersion}}"]),
        Duration::from_secs(15),
    );
    match out {
        None => Err(SandboxError::DockerUnavailable(
            "`docker info` could not run or timed out".into(),
        )),
        Some(o) if !o.status.success() => {
            let msg = String::from_utf8_lossy(&o.stderr);
            let line = msg
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no message");
            Err(SandboxError::DockerUnavailable(line.trim().to_string()))
        }
        Some(_) => Ok(()),
    }
}

/// Whether `image` is in the local engine (no pull).
pub fn image_present(image: &str) -> bool {
    run_with_timeout(
        Command::new("docker").args(["image", "inspect", "--format", "{{.Id}}", image]),
        Duration::from_secs(15),
    )
    .is_some_and(|o| o.status.success())
}

impl DockerBackend {
    /// Starts a container from `image` and waits until it accepts
    /// connections.
    pub fn start(image: &str) -> Result<DockerBackend, SandboxError> {
        DockerBackend::start_with(image, &[])
    }

    /// [`DockerBackend::start`] with extra `-c name=value` server settings.
    pub fn start_with(
        image: &str,
        settings: &[(String, String)],
    ) -> Result<DockerBackend, SandboxError> {
        engine_answers()?;
        let present = image_present(image);
        let (repo, tag) = split_image(image);
        let password = random_password();
        let request = Postgres::default()
            .with_password(&password)
            .with_name(repo)
            .with_tag(tag)
            // fsync off: a throwaway server; enough connections for parallel
            // tests and concurrency scenarios.
            .with_cmd(
                [
                    "-c",
                    "fsync=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "max_connections=300",
                ]
                .map(String::from)
                .into_iter()
                .chain(
                    settings
                        .iter()
                        .flat_map(|(k, v)| ["-c".to_string(), format!("{k}={v}")]),
                ),
            )
            // initdb's final sync of the new cluster is most of a start on a
            // busy disk (13 of 16 s measured on a loaded 2-core machine);
            // the cluster is thrown away, so it is skipped.
            .with_env_var("POSTGRES_INITDB_ARGS", "--no-sync")
            // The cluster lives in memory: a container's own filesystem can
            // be slow (fuse-overlayfs here: creating and copying databases
            // took ~1.7x as long as on tmpfs, measured side by side), and a
            // throwaway cluster needs no disk. PGDATA is set explicitly so
            // the mount is where every image (official or built by
            // ci/build-postgres-image.sh, any major) puts the cluster.
            .with_env_var("PGDATA", PGDATA)
            .with_mount(Mount::tmpfs_mount(PGDATA))
            .with_label(LABEL, std::process::id().to_string())
            .with_label(cleanup::HOST_LABEL, cleanup::host_name())
            .with_startup_timeout(Duration::from_secs(120));
        // With the logging collector on (capture's statement log), the
        // server's messages after its start go to the collector's files,
        // not to stderr where testcontainers waits for "ready": wait for
        // the collector taking over instead, then for the port to answer
        // (the init-time server listens on no TCP port).
        let collector = settings
            .iter()
            .any(|(k, v)| k == "logging_collector" && v == "on");
        let request = if collector {
            request.with_ready_conditions(vec![WaitFor::message_on_stderr(
                "redirecting log output to logging collector process",
            )])
        } else {
            request
        };
        cleanup::docker_starting();
        let container = request.start().map_err(|e| {
            let detail = e.to_string();
            if present {
                SandboxError::DockerStart {
                    image: image.to_string(),
                    detail,
                }
            } else {
                SandboxError::ImageUnavailable {
                    image: image.to_string(),
                    detail,
                }
            }
        })?;
        let docker_err = |e: testcontainers::TestcontainersError| SandboxError::DockerStart {
            image: image.to_string(),
            detail: e.to_string(),
        };
        let host = container.get_host().map_err(docker_err)?;
        let host_port = container.get_host_port_ipv4(5432).map_err(docker_err)?;
        let admin_url = format!("postgres://postgres:{password}@{host}:{host_port}/postgres");
        let registration = cleanup::register(Held::Container {
            id: container.id().to_string(),
        });
        if collector {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while let Err(e) = crate::db::connect(&admin_url) {
                if std::time::Instant::now() >= deadline {
                    return Err(SandboxError::DockerStart {
                        image: image.to_string(),
                        detail: e.to_string(),
                    });
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(DockerBackend {
            _registration: registration,
            image: image.to_string(),
            admin_url,
            host_port,
            container: Some(container),
        })
    }
}

impl Backend for DockerBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Docker
    }

    /// The image's own pg_dump in a throwaway container on the host's
    /// network (so a target on the host's loopback is reachable), with the
    /// connection passed through from the environment by name.
    fn pg_dump(&self, tls_files: &[super::TlsFile]) -> Option<Command> {
        let mut cmd = Command::new("docker");
        cleanup::docker_starting();
        cmd.args(["run", "--rm", "--network", "host"])
            .arg("--label")
            .arg(format!("{LABEL}={}", std::process::id()))
            .arg("--label")
            .arg(format!("{}={}", cleanup::HOST_LABEL, cleanup::host_name()))
            .args(super::dump::docker_env_args(tls_files))
            .args([self.image.as_str(), "pg_dump"]);
        Some(cmd)
    }

    fn admin_url(&self) -> &str {
        &self.admin_url
    }

    fn describe(&self) -> String {
        let id = self.container.as_ref().map_or("", |c| c.id());
        format!(
            "docker container {} (image {}) on port {}",
            &id[..12.min(id.len())],
            self.image,
            self.host_port
        )
    }
}

impl Drop for DockerBackend {
    fn drop(&mut self) {
        if cleanup::stopping() {
            // A signal's cleanup is removing it already; a second removal
            // would only race it and log a conflict.
            std::mem::forget(self.container.take());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{image_major, split_image};

    #[test]
    fn splits_image_names() {
        assert_eq!(split_image("postgres:15"), ("postgres", "15"));
        assert_eq!(split_image("postgres"), ("postgres", "latest"));
        assert_eq!(
            split_image("registry:5000/pg/postgres:15-alpine"),
            ("registry:5000/pg/postgres", "15-alpine")
        );
        assert_eq!(
            split_image("registry:5000/postgres"),
            ("registry:5000/postgres", "latest")
        );
    }

    #[test]
    fn reads_the_major_an_image_tag_claims() {
        assert_eq!(image_major("postgres:17"), Some(17));
        assert_eq!(image_major("postgres:17.2-bookworm"), Some(17));
        assert_eq!(image_major("registry:5000/pg/postgres:13-alpine"), Some(13));
        assert_eq!(image_major("postgres"), None);
        assert_eq!(image_major("registry:5000/postgres"), None);
        assert_eq!(image_major("postgres:latest"), None);
    }
}
