//! Lists that every turn builds alike, held once however many turns hold them.
//!
//! A turn builds the tool names its persona is offered and the tool specs sent with its
//! model calls; with thousands of turns waiting on the model, each holding a copy of its own
//! cost about a kilobyte a turn (heaptrack, 10,000 turns in flight: 10 MB). [`Interned::share`]
//! hands back an equal list already held when there is one, so the copy just built is freed
//! at once and every waiting turn points at the same list. Equality is the caller's, and the
//! list is built afresh each time, so a list that changed (a tool found or lost at run time,
//! a skill added) is a new entry, never a stale one. Knows nothing of what the lists hold.

use std::sync::{Arc, Mutex};

/// The most lists kept for sharing; when full, the ones no turn holds any more are let go
/// first, then the oldest.
const MOST: usize = 32;

pub struct Interned<T> {
    lists: Mutex<Vec<Arc<[T]>>>,
}

impl<T> Default for Interned<T> {
    fn default() -> Self {
        Interned {
            lists: Mutex::new(Vec::new()),
        }
    }
}

impl<T> Interned<T> {
    /// A list equal to `fresh` by `same`, element by element: one already held, else
    /// `fresh`, kept for the next caller.
    pub fn share(&self, fresh: Vec<T>, same: impl Fn(&T, &T) -> bool) -> Arc<[T]> {
        let mut lists = self.lists.lock().expect("interned lists");
        let equal = |held: &Arc<[T]>| {
            held.len() == fresh.len() && held.iter().zip(&fresh).all(|(a, b)| same(a, b))
        };
        if let Some(held) = lists.iter().find(|held| equal(held)) {
            return held.clone();
        }
        if lists.len() >= MOST {
            lists.retain(|held| Arc::strong_count(held) > 1);
            if lists.len() >= MOST {
                lists.remove(0);
            }
        }
        let list: Arc<[T]> = fresh.into();
        lists.push(list.clone());
        list
    }
}

#[cfg(test)]
mod tests {
    use super::{Interned, MOST};
    use std::sync::Arc;

    #[test]
    fn equal_lists_are_one_list_and_a_changed_one_is_new() {
        let interned = Interned::default();
        let a = interned.share(vec!["read".to_string(), "exec".to_string()], |x, y| x == y);
        let b = interned.share(vec!["read".to_string(), "exec".to_string()], |x, y| x == y);
        assert!(Arc::ptr_eq(&a, &b), "an equal list is the one already held");
        let c = interned.share(vec!["read".to_string()], |x, y| x == y);
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(&*c, ["read".to_string()]);
    }

    #[test]
    fn the_table_stays_bounded_and_keeps_lists_still_held() {
        let interned = Interned::default();
        let held = interned.share(vec![0usize], |x, y| x == y);
        for n in 1..(3 * MOST) {
            interned.share(vec![n], |x, y| x == y);
        }
        assert!(interned.lists.lock().unwrap().len() <= MOST);
        let again = interned.share(vec![0usize], |x, y| x == y);
        assert!(
            Arc::ptr_eq(&held, &again),
            "a list a turn still holds is not let go"
        );
    }
}
