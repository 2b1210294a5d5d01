//! The MemStore's ordered index of row mutations: a skiplist with one writer
//! at a time and any number of lock-free readers (LevelDB's design), whose
//! nodes live in the MemStore's arena and are freed with it, never alone.
//!
//! Writers insert through a [`Splice`], RocksDB's trick for batches: it
//! keeps the last insert's neighbours at every level, so a key that lands
//! next to the previous one costs a comparison or two instead of a search
//! from the top. Batches are inserted in (reverse) key order for that
//! reason.
//!
//! A node also knows its predecessor on the bottom level (written and read
//! by the writer alone), so a key known to go right before a node — a
//! series' next point, before its newest — goes in without a search: its
//! higher levels' predecessors are found by walking back from there (a
//! few nodes for most towers): see [`SkipList::insert_before`].
//!
//! Readers follow `next` pointers with acquire loads; a writer fills a node
//! completely before a release store links it in, bottom level first, so a
//! reader sees a node whole or not at all. Nothing is ever unlinked.

use std::cmp::Ordering;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering as AtomicOrdering};

use super::row::RowNode;

/// Levels of the tallest tower. With a quarter of the nodes reaching each
/// next level, 12 levels keep searches logarithmic to about 16M rows.
pub(super) const MAX_HEIGHT: usize = 12;

/// A node: its key, then `height` next pointers, then (in the arena) the
/// row and cell bytes the key points at.
#[repr(C)]
pub(super) struct Node {
    pub(super) key: RowNode,
    height: usize,
    /// The node before this one on the bottom level (null: the head).
    /// Only the writer, under the arena lock, reads or writes it; atomic
    /// so that writing it beside readers of the node is plainly defined.
    prev: AtomicPtr<Node>,
    // `height` AtomicPtr<Node> follow the struct.
}

impl Node {
    /// Bytes of a node with `height` levels.
    pub(super) fn size(height: usize) -> usize {
        std::mem::size_of::<Node>() + height * std::mem::size_of::<AtomicPtr<Node>>()
    }

    /// Writes a node with null links at `at`.
    ///
    /// # Safety
    /// `at` must be aligned for `Node` and valid for writes of
    /// `Node::size(height)` bytes that nothing else uses.
    pub(super) unsafe fn init(at: *mut u8, key: RowNode, height: usize) -> *mut Node {
        let node = at.cast::<Node>();
        // SAFETY: the caller gives us `size(height)` writable, aligned bytes;
        // the tower starts right after the struct, whose size is a multiple
        // of the pointer alignment.
        unsafe {
            node.write(Node {
                key,
                height,
                prev: AtomicPtr::new(ptr::null_mut()),
            });
            let tower = node.add(1).cast::<AtomicPtr<Node>>();
            for level in 0..height {
                tower.add(level).write(AtomicPtr::new(ptr::null_mut()));
            }
        }
        node
    }
}

/// The list. Its nodes are owned by the arena they were allocated in, which
/// must outlive it.
pub(super) struct SkipList {
    head: [AtomicPtr<Node>; MAX_HEIGHT],
    /// Levels in use; only grows.
    height: AtomicUsize,
}

impl std::fmt::Debug for SkipList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkipList")
            .field("height", &self.height.load(AtomicOrdering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Default for SkipList {
    fn default() -> Self {
        SkipList {
            head: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            height: AtomicUsize::new(1),
        }
    }
}

/// The neighbours of the last key inserted, at every level: `prev[l]` is
/// below the key (null: the head), `next[l]` above it (null: the end).
pub(super) struct Splice {
    prev: [*const Node; MAX_HEIGHT],
    next: [*const Node; MAX_HEIGHT],
    /// Levels at which `prev`/`next` are valid; 0 before the first insert.
    valid: usize,
}

impl Splice {
    pub(super) fn new() -> Self {
        Splice {
            prev: [ptr::null(); MAX_HEIGHT],
            next: [ptr::null(); MAX_HEIGHT],
            valid: 0,
        }
    }
}

/// # Safety (for the helpers below)
/// Every non-null node pointer handled here was linked into a list whose
/// arena is alive for as long as the caller holds the list.
#[inline]
fn key_of<'n>(node: *const Node) -> &'n RowNode {
    // SAFETY: see above; a linked node's key is never written again.
    unsafe { &(*node).key }
}

/// The bottom-level predecessor of a linked node (null: the head).
#[inline]
fn get_prev(node: *const Node) -> *const Node {
    // SAFETY: see `key_of`; `prev` is only touched by the writer.
    unsafe { (*node).prev.load(AtomicOrdering::Relaxed) }
}

#[inline]
fn set_prev(node: *const Node, prev: *const Node) {
    // SAFETY: see `key_of`, or `node` is the writer's own unlinked node.
    unsafe { (*node).prev.store(prev.cast_mut(), AtomicOrdering::Relaxed) }
}

impl SkipList {
    pub(super) fn is_empty(&self) -> bool {
        self.head[0].load(AtomicOrdering::Acquire).is_null()
    }

    /// The link of `node` (null: the head) at `level`.
    #[inline]
    fn link(&self, node: *const Node, level: usize) -> &AtomicPtr<Node> {
        if node.is_null() {
            return &self.head[level];
        }
        // SAFETY: `node` is a linked node (see `key_of`) with at least
        // `level + 1` levels: it was reached at `level` or found as a
        // neighbour there, and towers are written in full before linking.
        unsafe {
            debug_assert!(level < (*node).height);
            &*node.add(1).cast::<AtomicPtr<Node>>().add(level)
        }
    }

    #[inline]
    fn next(&self, node: *const Node, level: usize) -> *const Node {
        self.link(node, level).load(AtomicOrdering::Acquire)
    }

    /// The first node at or after `key` (strictly after, with `after`).
    pub(super) fn seek(&self, key: &RowNode, after: bool) -> *const Node {
        let mut x: *const Node = ptr::null();
        let mut level = self.height.load(AtomicOrdering::Relaxed) - 1;
        loop {
            let next = self.next(x, level);
            let before = !next.is_null()
                && match key_of(next).cmp(key) {
                    Ordering::Less => true,
                    Ordering::Equal => after,
                    Ordering::Greater => false,
                };
            if before {
                x = next;
            } else if level == 0 {
                return next;
            } else {
                level -= 1;
            }
        }
    }

    /// The last node before `key` (before the end, with `None`); null when
    /// there is none.
    pub(super) fn last_before(&self, key: Option<&RowNode>) -> *const Node {
        let mut x: *const Node = ptr::null();
        let mut level = self.height.load(AtomicOrdering::Relaxed) - 1;
        loop {
            let next = self.next(x, level);
            if !next.is_null() && key.is_none_or(|k| key_of(next) < k) {
                x = next;
            } else if level == 0 {
                return x;
            } else {
                level -= 1;
            }
        }
    }

    /// The node after `node` in order; null at the end.
    pub(super) fn successor(&self, node: *const Node) -> *const Node {
        self.next(node, 0)
    }

    /// The key of a node returned by this list.
    pub(super) fn key(&self, node: *const Node) -> &RowNode {
        key_of(node)
    }

    /// Links `node` in (before any node with an equal key).
    ///
    /// # Safety
    /// Only one thread inserts at a time (the MemStore's arena lock), the
    /// splice was used with this list alone and nothing else inserted since,
    /// and `node` came from [`Node::init`] in the list's arena and is not
    /// linked yet.
    pub(super) unsafe fn insert(&self, splice: &mut Splice, node: *mut Node) {
        let key = key_of(node);
        // SAFETY: `node` is ours until linked.
        let node_height = unsafe { (*node).height };
        let height = self.height.load(AtomicOrdering::Relaxed);
        if node_height > height {
            // Readers that see the new height find the head's empty links.
            self.height.store(node_height, AtomicOrdering::Relaxed);
        }
        let list_height = height.max(node_height);
        // Levels the last insert's splice does not know are the head's.
        for level in splice.valid..list_height {
            splice.prev[level] = ptr::null();
            splice.next[level] = self.next(ptr::null(), level);
        }
        splice.valid = list_height;
        // The lowest level whose neighbours still bracket the key: levels
        // above it do too (neighbours nest), levels below are searched again
        // starting from its `prev`.
        let brackets = |level: usize| {
            let (p, n) = (splice.prev[level], splice.next[level]);
            (p.is_null() || key_of(p) < key) && (n.is_null() || key < key_of(n))
        };
        let mut from = 0;
        while from < list_height && !brackets(from) {
            from += 1;
        }
        let (mut x, top) = if from == list_height {
            (ptr::null(), list_height)
        } else {
            (splice.prev[from], from)
        };
        for level in (0..top).rev() {
            let mut next = self.next(x, level);
            while !next.is_null() && key_of(next) < key {
                x = next;
                next = self.next(x, level);
            }
            splice.prev[level] = x;
            splice.next[level] = next;
        }
        for level in 0..node_height {
            let next = splice.next[level].cast_mut();
            // Not yet published: no reader can see this store before the
            // release below makes the node reachable.
            self.link(node, level).store(next, AtomicOrdering::Relaxed);
            if level == 0 {
                set_prev(node, splice.prev[0]);
                if !next.is_null() {
                    set_prev(next, node);
                }
            }
            self.link(splice.prev[level], level)
                .store(node, AtomicOrdering::Release);
            splice.prev[level] = node;
        }
    }

    /// Links `node` in right before `hint` when it belongs there — its key
    /// below the hint's and above the key of the node before the hint —
    /// without a search from the top: the bottom level's neighbours are
    /// the hint and its predecessor, and a higher level's predecessor is
    /// the first node at least that tall walking back from there (a node
    /// reaches a level with probability 4^-level, so a tower of two levels
    /// walks about four nodes, against a search's dozens of comparisons,
    /// each touching a node and its row). Gives up (false, nothing done)
    /// after [`HINT_WALK`] nodes, or when the tower would raise the list;
    /// then [`SkipList::insert`] places it. A wrong hint costs two
    /// comparisons, never a misplaced node.
    ///
    /// # Safety
    /// As [`SkipList::insert`]; `hint` is a node linked into this list.
    pub(super) unsafe fn insert_before(
        &self,
        splice: &mut Splice,
        node: *mut Node,
        hint: *const Node,
    ) -> bool {
        // SAFETY: `node` is ours until linked.
        let node_height = unsafe { (*node).height };
        if node_height > self.height.load(AtomicOrdering::Relaxed) {
            return false;
        }
        let key = key_of(node);
        if key >= key_of(hint) {
            return false;
        }
        let before = get_prev(hint);
        if !before.is_null() && key_of(before) >= key {
            return false;
        }
        // Predecessors by level: every node between `preds[level]` and
        // the new one is shorter than `level + 1`, so the new node goes
        // right after it on that level.
        let mut preds = [ptr::null::<Node>(); MAX_HEIGHT];
        preds[0] = before;
        let mut walked = 0;
        let mut x = before;
        for (level, pred) in preds.iter_mut().enumerate().take(node_height).skip(1) {
            while !x.is_null() && height_of(x) <= level {
                walked += 1;
                if walked > HINT_WALK {
                    return false;
                }
                x = get_prev(x);
            }
            *pred = x;
        }
        // `before` and `hint` are neighbours on the bottom level (every
        // insert keeps `prev` true), and the key lies between them.
        self.link(node, 0)
            .store(hint.cast_mut(), AtomicOrdering::Relaxed);
        set_prev(node, before);
        set_prev(hint, node);
        self.link(before, 0).store(node, AtomicOrdering::Release);
        // Bottom level first, as `insert` does: a reader that finds the
        // node on a level finds it on every level below.
        for (level, &pred) in preds.iter().enumerate().take(node_height).skip(1) {
            let next = self.next(pred, level);
            self.link(node, level)
                .store(next.cast_mut(), AtomicOrdering::Relaxed);
            self.link(pred, level).store(node, AtomicOrdering::Release);
        }
        // The splice's neighbours may no longer be neighbours, and moving
        // only some of its levels would break the nesting of its levels
        // that `insert` relies on: the next insert through it searches
        // from the top (a series' first point, or a walk given up).
        splice.valid = 0;
        true
    }

    /// Checks every level: keys strictly rising (equal keys are never
    /// linked twice), each level exactly the nodes of the bottom level
    /// tall enough for it, and the bottom level's `prev` links true.
    #[cfg(test)]
    pub(super) fn check_levels(&self) {
        let height = self.height.load(AtomicOrdering::Relaxed);
        let mut bottom = Vec::new();
        let mut prev: *const Node = ptr::null();
        let mut x = self.next(ptr::null(), 0);
        while !x.is_null() {
            assert_eq!(get_prev(x), prev, "a bottom-level prev link is wrong");
            if !prev.is_null() {
                assert!(key_of(prev) < key_of(x), "bottom level out of order");
            }
            bottom.push(x);
            prev = x;
            x = self.next(x, 0);
        }
        for level in 1..height {
            let expected: Vec<*const Node> = bottom
                .iter()
                .copied()
                .filter(|&n| height_of(n) > level)
                .collect();
            let mut linked = Vec::new();
            let mut x = self.next(ptr::null(), level);
            while !x.is_null() {
                linked.push(x);
                x = self.next(x, level);
            }
            assert!(linked == expected, "level {level} links the wrong nodes");
        }
    }
}

/// Nodes [`SkipList::insert_before`] walks back at most to find a tall
/// tower's predecessors before it leaves the node to a search.
const HINT_WALK: usize = 24;

/// The height of a linked node's tower.
#[inline]
fn height_of(node: *const Node) -> usize {
    // SAFETY: see `key_of`; a linked node's height is never written again.
    unsafe { (*node).height }
}

/// Tower heights: level `l` reached with probability 4^-l, from a
/// xorshift generator the writer keeps under its lock.
pub(super) fn random_height(state: &mut u64) -> usize {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    // Two bits per level: each pair of zero bits is one more level.
    let height = 1 + (x.trailing_zeros() as usize / 2);
    height.min(MAX_HEIGHT)
}
