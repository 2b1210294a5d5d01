//! A byte-budgeted LRU of decoded data blocks shared by every store file.
//!
//! Two priorities, as HBase's IN_MEMORY: blocks of in-memory families are
//! evicted only when no ordinary block is left to evict. Sharded by key so
//! readers on different files rarely contend on one lock.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::block::Block;

const SHARDS: usize = 16;

/// (reader id, block offset, projection id: 0 for the whole block, else
/// the [`crate::region::sst::Projection`] a TIME_SERIES block was decoded for)
pub type BlockKey = (u64, u64, u64);

#[derive(Debug, Default)]
pub struct CacheStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub evictions: AtomicU64,
    pub inserts: AtomicU64,
}

#[derive(Debug)]
struct Node {
    block: Arc<Block>,
    charge: usize,
    in_memory: bool,
    tick: u64,
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<BlockKey, Node>,
    normal: BTreeMap<u64, BlockKey>,
    memory: BTreeMap<u64, BlockKey>,
    bytes: usize,
    tick: u64,
}

impl Shard {
    fn order(&mut self, in_memory: bool) -> &mut BTreeMap<u64, BlockKey> {
        if in_memory {
            &mut self.memory
        } else {
            &mut self.normal
        }
    }
}

#[derive(Debug)]
pub struct BlockCache {
    shards: Vec<Mutex<Shard>>,
    shard_budget: usize,
    stats: CacheStats,
}

/// The next [`BlockCache::new_reader_id`], one counter for every cache:
/// what keys by reader, a fold's blocks read ahead among them, may see
/// files of several caches.
static NEXT_READER_ID: AtomicU64 = AtomicU64::new(1);

impl BlockCache {
    pub fn new(budget_bytes: usize) -> Arc<Self> {
        Arc::new(BlockCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_budget: budget_bytes / SHARDS,
            stats: CacheStats::default(),
        })
    }

    pub fn stats(&self) -> &CacheStats {
        &self.stats
    }

    /// A process-unique id for an opened store file, so blocks of a deleted
    /// file can never be mistaken for those of a new one.
    pub fn new_reader_id(&self) -> u64 {
        NEXT_READER_ID.fetch_add(1, Ordering::Relaxed)
    }

    fn shard(&self, key: &BlockKey) -> &Mutex<Shard> {
        let h = key.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (key.1 >> 12) ^ key.2;
        &self.shards[(h % SHARDS as u64) as usize]
    }

    pub fn get(&self, key: &BlockKey) -> Option<Arc<Block>> {
        let mut s = self.shard(key).lock();
        s.tick += 1;
        let tick = s.tick;
        let Some(node) = s.map.get_mut(key) else {
            drop(s);
            self.stats.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let old = std::mem::replace(&mut node.tick, tick);
        let (block, in_memory) = (node.block.clone(), node.in_memory);
        let order = s.order(in_memory);
        order.remove(&old);
        order.insert(tick, *key);
        drop(s);
        self.stats.hits.fetch_add(1, Ordering::Relaxed);
        Some(block)
    }

    pub fn insert(&self, key: BlockKey, block: Arc<Block>, in_memory: bool) {
        let charge = block.charge();
        if charge > self.shard_budget {
            return;
        }
        let mut s = self.shard(&key).lock();
        s.tick += 1;
        let tick = s.tick;
        if let Some(old) = s.map.remove(&key) {
            s.bytes -= old.charge;
            s.order(old.in_memory).remove(&old.tick);
        }
        while s.bytes + charge > self.shard_budget {
            let victim = s
                .normal
                .pop_first()
                .or_else(|| s.memory.pop_first())
                .map(|(_, k)| k);
            let Some(victim) = victim else { break };
            if let Some(n) = s.map.remove(&victim) {
                s.bytes -= n.charge;
                self.stats.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        s.bytes += charge;
        s.order(in_memory).insert(tick, key);
        s.map.insert(
            key,
            Node {
                block,
                charge,
                in_memory,
                tick,
            },
        );
        self.stats.inserts.fetch_add(1, Ordering::Relaxed);
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().bytes).sum()
    }

    /// Drops every block of one reader (its file was deleted).
    pub fn evict_reader(&self, reader_id: u64) {
        for shard in &self.shards {
            let mut s = shard.lock();
            let keys: Vec<BlockKey> = s.map.keys().filter(|k| k.0 == reader_id).copied().collect();
            for k in keys {
                if let Some(n) = s.map.remove(&k) {
                    s.bytes -= n.charge;
                    s.order(n.in_memory).remove(&n.tick);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::sst::block::BlockBuilder;

    fn block(n: usize) -> Arc<Block> {
        let mut b = BlockBuilder::new(true);
        for i in 0..n {
            let k = crate::cell::encode_key(
                format!("r{i:05}").as_bytes(),
                b"f",
                b"q",
                1,
                crate::cell::CellKind::Put,
                false,
            );
            b.add(&k, None, &[0u8; 100]);
        }
        Arc::new(Block::parse(b.finish()).unwrap())
    }

    #[test]
    fn stays_within_budget_and_prefers_in_memory_blocks() {
        let one = block(10).charge();
        let cache = BlockCache::new(one * SHARDS * 3);
        // Same shard: reader id equal, offsets differ only in low bits.
        cache.insert((1, 0, 0), block(10), true);
        for off in 1..10u64 {
            cache.insert((1, off, 0), block(10), false);
        }
        assert!(cache.bytes() <= one * 3 * SHARDS);
        assert!(
            cache.get(&(1, 0, 0)).is_some(),
            "in-memory block evicted before ordinary ones"
        );
        assert!(cache.get(&(1, 1, 0)).is_none());
        assert!(cache.stats().evictions.load(Ordering::Relaxed) >= 7);
        assert_eq!(cache.stats().hits.load(Ordering::Relaxed), 1);
        assert_eq!(cache.stats().misses.load(Ordering::Relaxed), 1);
    }
}
