//! The use-after-free fix in our patched copy of `zookeeper-client` (`vendor/zookeeper-client`,
//! see its `PATCHES.md`).
//!
//! The client parks a `RemoveWatches` request for a path while a watching request on that path
//! is unanswered, in a map whose key borrows the path from the parked request. A second request
//! parked for the same path and mode replaced the first, dropping it, while the map kept the
//! first one's key: the next lookup on that path read freed memory. Here a fake server in the
//! same process (no ZooKeeper needed) sends two notifications for a path the client no longer
//! watches (each makes the client park a `RemoveWatches`) while a `get_and_watch_data` of that
//! path is unanswered, then answers it, and the answer's lookup reads the key. To make that
//! read fail rather than see stale bytes, this test binary's allocator gives each request
//! buffer of the two sizes involved its own page and makes the page unreadable when it is
//! freed. Against the unpatched crate the test process dies of SIGSEGV.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The watched path's length, chosen so that the two request buffers have sizes nothing else
/// in the process allocates.
const PATH_LEN: usize = 333;
/// A `RemoveWatches` request's buffer: length 4, header 8, path 4 + len, mode 4.
const REMOVE_WATCHES_SIZE: usize = 20 + PATH_LEN;
/// A `GetData` request's buffer: length 4, header 8, path 4 + len, watch flag 1.
const GET_DATA_SIZE: usize = 17 + PATH_LEN;
const PAGE: usize = 4096;

static GUARDING: AtomicUsize = AtomicUsize::new(0);
static REMOVE_WATCHES_MADE: AtomicUsize = AtomicUsize::new(0);
/// The blocks handed out on pages of their own, so that their free is told from System's.
static GUARDED_BLOCKS: [AtomicUsize; 64] = [const { AtomicUsize::new(0) }; 64];

/// The system allocator, except that while `GUARDING` is set, a buffer of one of the two sizes
/// gets pages of its own, which are made unreadable (and never reused) when it is freed.
struct GuardedAllocator;

fn guarded(layout: &Layout) -> bool {
    GUARDING.load(Relaxed) != 0
        && layout.align() <= PAGE
        && (layout.size() == REMOVE_WATCHES_SIZE || layout.size() == GET_DATA_SIZE)
}

fn pages(size: usize) -> usize {
    size.div_ceil(PAGE) * PAGE
}

// SAFETY: every block handed out is valid for its layout (fresh page-aligned mappings, or
// System's); a block is given back to System only if it is not one of the mapped ones, which
// are listed in `GUARDED_BLOCKS` before they are handed out.
unsafe impl GlobalAlloc for GuardedAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !guarded(&layout) {
            return unsafe { System.alloc(layout) };
        }
        let Some(slot) = GUARDED_BLOCKS.iter().find(|s| s.load(Relaxed) == 0) else {
            return unsafe { System.alloc(layout) };
        };
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                pages(layout.size()),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        // One thread allocates here (a current-thread runtime), so the slot found is still free.
        slot.store(p as usize, Relaxed);
        if layout.size() == REMOVE_WATCHES_SIZE {
            REMOVE_WATCHES_MADE.fetch_add(1, Relaxed);
        }
        p.cast()
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if GUARDED_BLOCKS.iter().any(|s| s.load(Relaxed) == p as usize) {
            // Never unmapped, so never reused: any later read faults.
            unsafe { libc::mprotect(p.cast(), pages(layout.size()), libc::PROT_NONE) };
        } else {
            unsafe { System.dealloc(p, layout) }
        }
    }
}

#[global_allocator]
static ALLOCATOR: GuardedAllocator = GuardedAllocator;

fn watched_path() -> String {
    format!("/{}", "z".repeat(PATH_LEN - 1))
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut v = (body.len() as i32).to_be_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

fn reply(xid: i32, zxid: i64, err: i32, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&xid.to_be_bytes());
    b.extend_from_slice(&zxid.to_be_bytes());
    b.extend_from_slice(&err.to_be_bytes());
    b.extend_from_slice(payload);
    frame(&b)
}

/// A `NodeDataChanged` notification for `path`.
fn notification(path: &str) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&3i32.to_be_bytes()); // NodeDataChanged
    b.extend_from_slice(&3i32.to_be_bytes()); // SyncConnected
    b.extend_from_slice(&(path.len() as i32).to_be_bytes());
    b.extend_from_slice(path.as_bytes());
    reply(-1, 1, 0, &b)
}

/// A `GetData` answer: one byte of data and an all-zero stat.
fn get_data_reply(xid: i32) -> Vec<u8> {
    let mut b = 1i32.to_be_bytes().to_vec();
    b.push(b'd');
    b.extend_from_slice(&[0u8; 68]);
    reply(xid, 2, 0, &b)
}

async fn read_frame(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let n = s.read_i32().await? as usize;
    let mut b = vec![0; n];
    s.read_exact(&mut b).await?;
    Ok(b)
}

/// Accepts one client, answers its connect and pings, and answers its `GetData` only after two
/// notifications for the watched path; any other request gets an empty success.
async fn fake_server(listener: TcpListener) {
    let (mut s, _) = listener.accept().await.unwrap();
    read_frame(&mut s).await.unwrap();
    let mut connected = Vec::new();
    connected.extend_from_slice(&0i32.to_be_bytes()); // protocol version
    connected.extend_from_slice(&6000i32.to_be_bytes()); // session timeout
    connected.extend_from_slice(&0x1234i64.to_be_bytes()); // session id
    connected.extend_from_slice(&16i32.to_be_bytes());
    connected.extend_from_slice(&[7u8; 16]); // password
    connected.push(0); // not read-only
    s.write_all(&frame(&connected)).await.unwrap();
    loop {
        let Ok(request) = read_frame(&mut s).await else {
            return;
        };
        let xid = i32::from_be_bytes(request[0..4].try_into().unwrap());
        let op = i32::from_be_bytes(request[4..8].try_into().unwrap());
        let out = match op {
            11 => reply(-2, 0, 0, &[]), // ping
            4 => {
                let mut out = notification(&watched_path());
                out.extend(notification(&watched_path()));
                out.extend(get_data_reply(xid));
                out
            }
            _ => reply(xid, 3, 0, &[]),
        };
        s.write_all(&out).await.unwrap();
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_second_parked_remove_watches_leaves_no_dangling_key() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(fake_server(listener));
    let client = zookeeper_client::Client::connect(&addr.to_string())
        .await
        .expect("connect to the fake server");
    GUARDING.store(1, Relaxed);
    let answered = tokio::time::timeout(
        Duration::from_secs(5),
        client.get_and_watch_data(&watched_path()),
    )
    .await;
    GUARDING.store(0, Relaxed);
    let made = REMOVE_WATCHES_MADE.load(Relaxed);
    assert!(
        made >= 2,
        "the client made {made} RemoveWatches requests, not 2: the scenario did not run"
    );
    let (data, _, _) = answered
        .expect("the GetData answer was not delivered within 5 s")
        .expect("GetData failed");
    assert_eq!(data, b"d");
}
