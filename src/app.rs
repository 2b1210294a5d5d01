//! The service wired together: `halite serve` opens the store, starts the
//! query engine, the chores, the Kafka consumer and the HTTP listeners,
//! and stops them in order (readiness, Kafka, listeners, the query engine,
//! chores, the store).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::api::{self, AppState};
use crate::catalog::{CreateTable, TableName};
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::ingest::kafka::topic_writer::TopicWriter;
use crate::ingest::kafka::{DeleteFailure, KafkaIngest, PointDeletes, read_delete};
use crate::objects::Objects;
use crate::query::Query;
use crate::query::engine::QueryEngine;
use crate::region::file_cache::FileCache;
use crate::region::remote::Nodes;
use crate::store::Store;
use crate::store::chores::{CatalogRefresh, CompactionChecker, MemoryGuard, Splitter};
use crate::store::cluster::ClusterStorage;

/// Kafka's delete messages select their points as `POST …/delete` does:
/// a point query, run by the query engine.
impl PointDeletes for QueryEngine {
    fn delete_points(
        &self,
        table: &TableName,
        request: serde_json::Value,
    ) -> Result<u64, DeleteFailure> {
        let q: Query = read_delete(request).map_err(DeleteFailure::Bad)?;
        QueryEngine::delete_points(self, table, &q).map_err(DeleteFailure::Store)
    }
}

/// Holds SIGINT and SIGTERM pending until [`serve`] listens for them, so
/// a Ctrl-C during start-up (WAL replay, a broker starting) stops the
/// service cleanly once it can, instead of killing it half way and leaving
/// its files (and the demo's broker) behind. Threads started meanwhile
/// inherit the mask; the signal is taken by the thread that unblocks it.
pub fn hold_stop_signals(hold: bool) {
    // SAFETY: sigset_t is plain data initialised by sigemptyset before use;
    // pthread_sigmask changes only this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let how = if hold {
            libc::SIG_BLOCK
        } else {
            libc::SIG_UNBLOCK
        };
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

pub fn serve(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    hold_stop_signals(true);
    crate::telemetry::init_logging(&config.log);
    let telemetry = match crate::telemetry::Telemetry::install() {
        Ok(t) => Some(Arc::new(t)),
        Err(e) => {
            tracing::warn!(error = %e, "metrics are off");
            None
        }
    };
    // Injected I/O faults, for tests of a failing disk (HALITE_FAULTS).
    crate::fault::arm_from_env(&config.data_dir)?;
    // A record of every change to the data directory, for the power-cut
    // tests (HALITE_POWER_TRACE).
    crate::fault::power::arm_from_env(&config.data_dir)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let started = Instant::now();
    let store = Arc::new(open_store(&config, clock.clone())?);
    // Before anything listens or consumes: a server other machines reach
    // checks tokens, and will not start with none to check.
    let auth = crate::api::decide_auth(
        &config.auth,
        &config.server.listen,
        store.catalog().has_tokens(),
        store.is_cluster(),
    )?;
    if !auth.enabled && !crate::api::is_loopback(&config.server.listen) {
        tracing::warn!(
            listen = %config.server.listen,
            "serving without authentication on an address other machines reach (--insecure)"
        );
    }
    ensure_tables(&store, &config.tables)?;
    let catalog_refresh = store
        .is_cluster()
        .then(|| CatalogRefresh::start(&store))
        .transpose()?;
    let queries = Arc::new(QueryEngine::new(store.clone(), config.server.query_threads));
    let splitter = Splitter::start(&store, config.region.split_check_interval.0)?;
    let memory_guard = MemoryGuard::start(&store)?;
    let compaction_checker =
        CompactionChecker::start(&store, config.region.compaction.check_interval.0)?;
    let scrubber = crate::store::scrub::Scrubber::start(&store, config.region.scrub_rate.0)?;
    // A cluster's HTTP writes go through the topics, as every other point;
    // the consumer forwards misrouted points through the same producer.
    let topics = if store.is_cluster() {
        Some(Arc::new(TopicWriter::start(&config.kafka)?))
    } else {
        None
    };
    // One dictionary per namespace for every door: two would give the
    // same name two UIDs, or one UID two names.
    let tag_sets = Arc::new(crate::series::TagSets::new());
    let kafka = if config.kafka.enabled() {
        let k = KafkaIngest::start(
            &config.kafka,
            store.clone(),
            queries.clone(),
            clock.clone(),
            topics.clone(),
            tag_sets.clone(),
            config.influx.template(),
        )?;
        tracing::info!(
            topics = %config
                .kafka
                .topics
                .iter()
                .map(|t| match &t.database {
                    Some(db) => format!("{} -> database {db}", t.topic),
                    None => format!("{} -> {}", t.topic, t.table),
                })
                .collect::<Vec<_>>()
                .join(", "),
            brokers = %config.kafka.brokers,
            group = %config.kafka.group_id,
            "consuming from Kafka"
        );
        Some(k)
    } else {
        None
    };
    let state = Arc::new(AppState {
        store: store.clone(),
        queries: queries.clone(),
        clock,
        ready: false.into(),
        max_body: config.server.max_body.0 as usize,
        write_piece: config.server.write_piece.0 as usize,
        body_timeout: config.server.body_timeout.0,
        ingest: kafka.as_ref().map(|k| k.stats.clone()),
        topics,
        telemetry,
        tag_sets,
        influx: config.influx.clone(),
        prometheus: config.prometheus.clone(),
        browsers: Arc::new(api::BrowserPolicy::new(
            &config.server.allowed_origins,
            &config.server.allowed_hosts,
            &[&config.server.listen, &config.cluster.advertise],
            auth.enabled,
        )),
        failed_logins: api::FailedLogins::new(config.auth.slow_after_failures),
        auth,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        // Listening first, then taking the signals held since start-up.
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        let mut hangup = signal(SignalKind::hangup())?;
        hold_stop_signals(false);
        let tls = if config.server.tls_cert.is_empty() {
            None
        } else {
            Some(Arc::new(api::listen::Tls::load(
                std::path::Path::new(&config.server.tls_cert),
                std::path::Path::new(&config.server.tls_key),
            )?))
        };
        let serving = api::listen::Serving {
            header_timeout: config.server.header_timeout.0,
            idle_timeout: config.server.idle_timeout.0,
            tls: tls.clone(),
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let listener = tokio::net::TcpListener::bind(&config.server.listen).await?;
        let addr = listener.local_addr()?;
        let metrics_listener = if config.server.metrics_listen.is_empty() {
            None
        } else {
            let l = tokio::net::TcpListener::bind(&config.server.metrics_listen)
                .await
                .map_err(|e| {
                    format!(
                        "cannot listen on server.metrics_listen {}: {e}",
                        config.server.metrics_listen
                    )
                })?;
            tracing::info!("metrics also on {scheme}://{}/metrics", l.local_addr()?);
            Some(l)
        };
        state.ready.store(true, Ordering::Release);
        tracing::info!(
            data = %config.data_dir.display(),
            tables = store.catalog().tables(None).len(),
            started_s = started.elapsed().as_secs_f64(),
            "halite serving {scheme}://{addr}"
        );
        // SIGHUP: the certificate and key are read again (renewed ones
        // take effect without a restart).
        tokio::spawn(async move {
            while hangup.recv().await.is_some() {
                match &tls {
                    Some(tls) => match tls.reload() {
                        Ok(()) => tracing::info!("TLS certificate and key reloaded"),
                        Err(e) => tracing::error!(error = %e, "TLS reload failed; the old certificate stays"),
                    },
                    None => tracing::info!("SIGHUP: nothing to reload (no TLS)"),
                }
            }
        });
        let ready = state.clone();
        let (stopping, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            // Readiness drops first, so load balancers stop sending; the
            // API still answers (503 on /readyz) while the consumer stops
            // fetching, makes what it fetched durable and commits it.
            ready.ready.store(false, Ordering::Release);
            tracing::info!("stopping: readiness dropped, draining");
            if let Some(k) = kafka {
                let _ = tokio::task::spawn_blocking(move || k.stop()).await;
            }
            let _ = stopping.send(true);
        });
        let shutdown = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|stop| *stop).await;
        };
        // InfluxQL's continuous queries, on their schedule.
        tokio::spawn(api::run_continuous_queries(
            state.clone(),
            shutdown(stopped.clone()),
        ));
        let metrics_server = metrics_listener.map(|l| {
            tokio::spawn(api::serve_metrics(
                l,
                state.clone(),
                serving.clone(),
                shutdown(stopped.clone()),
            ))
        });
        let served = api::serve(listener, state.clone(), serving, shutdown(stopped)).await;
        if let Some(m) = metrics_server {
            match m.await {
                Ok(Err(e)) => tracing::warn!(error = %e, "the metrics listener failed"),
                Err(e) => tracing::warn!(error = %e, "the metrics listener failed"),
                Ok(Ok(())) => {}
            }
        }
        served.map_err(Box::<dyn std::error::Error>::from)
    })?;
    drop(runtime);
    drop(state);
    drop(queries);
    splitter.stop();
    memory_guard.stop();
    compaction_checker.stop();
    if let Some(s) = scrubber {
        s.stop();
    }
    if let Some(c) = catalog_refresh {
        c.stop();
    }
    let store = match Arc::try_unwrap(store) {
        Ok(store) => store,
        Err(shared) => {
            // Still held (by a Kafka consumer stuck past its stop deadline):
            // what is in memory is made durable before the process goes.
            let flushed = shared.flush_all().and_then(|()| shared.sync_wals());
            return Err(match flushed {
                Ok(()) => {
                    "the store was still in use at shutdown; its MemStores were flushed".into()
                }
                Err(e) => format!(
                    "the store was still in use at shutdown, and flushing its MemStores failed: {e}"
                )
                .into(),
            });
        }
    };
    store.close()?;
    tracing::info!("halite stopped cleanly");
    Ok(())
}

/// The store: a single node's on its disk, or (`[cluster] node` set) a
/// cluster's node's, with the object store of `[objects]`.
fn open_store(config: &Config, clock: Arc<dyn Clock>) -> Result<Store, Box<dyn std::error::Error>> {
    if !config.cluster.enabled() {
        return Ok(Store::open(
            &config.data_dir,
            config.store_options(),
            clock,
        )?);
    }
    let objects = Arc::new(Objects::open(
        &config.objects,
        &config.data_dir.join("objects"),
    )?);
    let files = Arc::new(FileCache::open(
        &config.data_dir.join("cache"),
        config.cluster.cache_size.0,
    )?);
    tracing::info!(
        node = %config.cluster.node,
        objects = objects.describe(),
        "cluster mode: store files, manifests and the catalog on the object store"
    );
    Ok(Store::open_cluster(
        &config.data_dir,
        config.store_options(),
        clock,
        ClusterStorage {
            // Nodes read each other's tails with the bootstrap token
            // (their APIs may check tokens), over HTTPS when they serve it,
            // trusting HALITE_CACERT or else the nodes' own certificate.
            nodes: Arc::new(Nodes::new(
                objects.clone(),
                (!config.auth.bootstrap_token.is_empty())
                    .then(|| config.auth.bootstrap_token.clone()),
                &node_tls(config),
            )?),
            objects,
            node: config.cluster.node.clone(),
            address: {
                let address = if config.cluster.advertise.is_empty() {
                    config.server.listen.clone()
                } else {
                    config.cluster.advertise.clone()
                };
                if config.server.tls_cert.is_empty() || address.contains("://") {
                    address
                } else {
                    format!("https://{address}")
                }
            },
            files,
        },
    )?)
}

/// The certificates a node trusts when the others serve HTTPS.
fn node_tls(config: &Config) -> crate::client::Tls {
    let mut tls = crate::client::Tls::from_env();
    if tls.ca_file.is_none() && !config.server.tls_cert.is_empty() {
        tls.ca_file = Some(config.server.tls_cert.clone().into());
    }
    tls
}

/// Creates the configured tables (and their namespaces) that do not exist.
/// A cluster's nodes start at once: the first creates a table, the others
/// find it made.
fn ensure_tables(store: &Store, tables: &[CreateTable]) -> Result<(), Box<dyn std::error::Error>> {
    for t in tables {
        if store.catalog().table(&t.name).is_err() {
            match store.create_table(t) {
                Ok(_) => tracing::info!(table = %t.name, "created table"),
                Err(e) if store.is_cluster() && e.kind() == crate::error::ErrorKind::Conflict => {
                    store.refresh_catalog()?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}
