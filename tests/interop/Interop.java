// Apache Curator peer for zk-recipes interoperability tests.
//
// Build (default package, against Debian's jars; tests/support/interop.rs does this for you):
//   J=/usr/share/java
//   CP=$J/curator-recipes.jar:$J/curator-framework.jar:$J/curator-client.jar:$J/zookeeper.jar:\
//      $J/zookeeper-jute.jar:$J/guava.jar:$J/slf4j-api.jar:$J/slf4j-nop.jar:$J/netty-all.jar
//   javac -d OUT -cp "$CP" tests/interop/Interop.java && java -cp "OUT:$CP" Interop MODE ...
//
// Modes (CONNECT = host:port[/chroot], PATH = lock path):
//   mutex     CONNECT PATH ITERATIONS HOLD_MS [ID]          InterProcessMutex
//   read      CONNECT PATH ITERATIONS HOLD_MS [ID]          InterProcessReadWriteLock.readLock()
//   write     CONNECT PATH ITERATIONS HOLD_MS [ID]          InterProcessReadWriteLock.writeLock()
//   latch     CONNECT PATH ID HOLD_MS [ITERATIONS]          LeaderLatch(client, PATH, ID): await, hold, close
//   hold      CONNECT PATH [ID]                             InterProcessMutex, held until stdin reaches EOF
//   semaphore CONNECT PATH PERMITS ITERATIONS HOLD_MS [ID]  InterProcessSemaphoreV2, one lease at a time
//   revocable CONNECT PATH [ID]                        InterProcessMutex.makeRevocable: held until a
//                                                      revocation request (prints REVOKED) or stdin EOF
//   revoke    CONNECT NODE_PATH                        Revoker.attemptRevoke(NODE_PATH): prints REVOKE-SENT
// ID defaults to "curator-<pid>".
//
// Output: one line per event on stdout, flushed at once:
//   READY                                   connected (session established)
//   REQ <monotonic_ns> <kind> <id>          just before calling acquire/await
//   ACQ <monotonic_ns> <kind> <id> <node>   just after acquire returned; node = our znode's name (last
//                                           path component) or "-" if unknown
//   REL <monotonic_ns> <kind> <id> [lost]   just BEFORE releasing; with "lost" when the connection was
//                                           SUSPENDED/LOST (or leadership was revoked) while holding:
//                                           from then on the hold is not trusted
//   ERR <message>                           failure (the process then exits with status 1)
//   DONE                                    finished normally
// kind: lock | read | write | latch | sem.  monotonic_ns = System.nanoTime() (CLOCK_MONOTONIC on Linux).
// The recorded interval [ACQ, REL] lies inside the real holding interval, so two recorded intervals
// that overlap prove a real overlap.
// Session timeout 4 s, ExponentialBackoffRetry(100, 3), ensembleTracker off. Logging goes to slf4j-nop.

import java.io.InputStream;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.locks.RevocationListener;
import org.apache.curator.framework.recipes.locks.Revoker;
import java.util.concurrent.CountDownLatch;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class Interop {
    static final Object OUT = new Object();

    static void out(String line) {
        synchronized (OUT) {
            System.out.println(line);
            System.out.flush();
        }
    }

    static long now() { return System.nanoTime(); }

    static String lastComponent(String path) {
        if (path == null || path.isEmpty()) return "-";
        int i = path.lastIndexOf('/');
        return i >= 0 ? path.substring(i + 1) : path;
    }

    static String defaultId() { return "curator-" + ProcessHandle.current().pid(); }

    // ------------------------------------------------------------------ holding state
    // Set while we hold something. A connection-state change to SUSPENDED/LOST (or a lost leadership)
    // while holding prints "REL ... lost" once and wakes the holder.
    static final Object HOLD = new Object();
    static String holdKind = null, holdId = null;
    static boolean holdLost = false;

    static void beginHold(String kind, String id) {
        synchronized (HOLD) { holdKind = kind; holdId = id; holdLost = false; }
    }

    static void markLost() {
        synchronized (HOLD) {
            if (holdKind != null && !holdLost) {
                holdLost = true;
                out("REL " + now() + " " + holdKind + " " + holdId + " lost");
                HOLD.notifyAll();
            }
        }
    }

    /** Sleep up to ms (or forever if ms < 0) unless the hold is lost. */
    static void holdFor(long ms) throws InterruptedException {
        long deadline = ms < 0 ? Long.MAX_VALUE : now() + TimeUnit.MILLISECONDS.toNanos(ms);
        synchronized (HOLD) {
            while (!holdLost) {
                long left = deadline - now();
                if (left <= 0) break;
                TimeUnit.NANOSECONDS.timedWait(HOLD, Math.min(left, TimeUnit.MILLISECONDS.toNanos(50)));
            }
        }
    }

    /** Print the normal REL line (unless the lost one was already printed) and clear the state. */
    static void endHold() {
        synchronized (HOLD) {
            if (holdKind != null && !holdLost) out("REL " + now() + " " + holdKind + " " + holdId);
            holdKind = null; holdId = null; holdLost = false;
        }
    }

    // ------------------------------------------------------------------ Curator
    static CuratorFramework connect(String cs) throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.builder()
            .connectString(cs)
            .sessionTimeoutMs(4000)
            .connectionTimeoutMs(4000)
            .retryPolicy(new ExponentialBackoffRetry(100, 3))
            .ensembleTracker(false)
            .build();
        c.getConnectionStateListenable().addListener((client, state) -> {
            if (state == ConnectionState.SUSPENDED || state == ConnectionState.LOST) markLost();
        });
        c.start();
        if (!c.blockUntilConnected(20, TimeUnit.SECONDS)) throw new IllegalStateException("could not connect to " + cs);
        return c;
    }

    static Method lockPathMethod;

    /** InterProcessMutex.getLockPath() is protected; ReadLock/WriteLock override it. */
    static String lockNode(InterProcessMutex m) {
        try {
            if (lockPathMethod == null) {
                lockPathMethod = InterProcessMutex.class.getDeclaredMethod("getLockPath");
                lockPathMethod.setAccessible(true);
            }
            return lastComponent((String) lockPathMethod.invoke(m));
        } catch (Exception e) {
            return "-";
        }
    }

    static void runMutex(InterProcessMutex m, String kind, String id, int iterations, long holdMs) throws Exception {
        for (int i = 0; i < iterations; i++) {
            out("REQ " + now() + " " + kind + " " + id);
            m.acquire();
            beginHold(kind, id);
            out("ACQ " + now() + " " + kind + " " + id + " " + lockNode(m));
            holdFor(holdMs);
            endHold();
            m.release();
        }
    }

    static void waitStdinEof() throws Exception {
        InputStream in = System.in;
        byte[] buf = new byte[256];
        while (in.read(buf) >= 0) { /* discard */ }
    }

    static int intArg(String[] a, int i, String name) {
        if (a.length <= i) throw new IllegalArgumentException("missing " + name);
        return Integer.parseInt(a[i]);
    }

    static String optArg(String[] a, int i, String dflt) { return a.length > i ? a[i] : dflt; }

    static void usage() {
        out("ERR usage: Interop (mutex|read|write) CONNECT PATH ITERATIONS HOLD_MS [ID] | latch CONNECT PATH ID HOLD_MS [ITERATIONS]"
            + " | hold CONNECT PATH [ID] | semaphore CONNECT PATH PERMITS ITERATIONS HOLD_MS [ID]");
        System.exit(2);
    }

    public static void main(String[] a) {
        if (a.length < 3) usage();
        String mode = a[0], cs = a[1], path = a[2];
        CuratorFramework c = null;
        try {
            c = connect(cs);
            out("READY");
            switch (mode) {
                case "mutex": {
                    InterProcessMutex m = new InterProcessMutex(c, path);
                    runMutex(m, "lock", optArg(a, 5, defaultId()), intArg(a, 3, "ITERATIONS"), intArg(a, 4, "HOLD_MS"));
                    break;
                }
                case "read":
                case "write": {
                    InterProcessReadWriteLock rw = new InterProcessReadWriteLock(c, path);
                    InterProcessMutex m = mode.equals("read") ? rw.readLock() : rw.writeLock();
                    runMutex(m, mode, optArg(a, 5, defaultId()), intArg(a, 3, "ITERATIONS"), intArg(a, 4, "HOLD_MS"));
                    break;
                }
                case "hold": {
                    String id = optArg(a, 3, defaultId());
                    InterProcessMutex m = new InterProcessMutex(c, path);
                    out("REQ " + now() + " lock " + id);
                    m.acquire();
                    beginHold("lock", id);
                    out("ACQ " + now() + " lock " + id + " " + lockNode(m));
                    waitStdinEof();
                    endHold();
                    m.release();
                    break;
                }
                case "revocable": {
                    String id = optArg(a, 3, defaultId());
                    InterProcessMutex m = new InterProcessMutex(c, path);
                    CountDownLatch asked = new CountDownLatch(1);
                    // Curator calls the listener on its own thread; the owning thread releases.
                    m.makeRevocable(new RevocationListener<InterProcessMutex>() {
                        @Override public void revocationRequested(InterProcessMutex forLock) { asked.countDown(); }
                    });
                    out("REQ " + now() + " lock " + id);
                    m.acquire();
                    beginHold("lock", id);
                    out("ACQ " + now() + " lock " + id + " " + lockNode(m));
                    Thread eof = new Thread(() -> {
                        try { waitStdinEof(); } catch (Exception ignored) {}
                        asked.countDown();
                    });
                    eof.setDaemon(true);
                    eof.start();
                    asked.await();
                    out("REVOKED");
                    endHold();
                    m.release();
                    break;
                }
                case "revoke": {
                    Revoker.attemptRevoke(c, path);
                    out("REVOKE-SENT");
                    break;
                }
                case "latch": {
                    if (a.length < 5) usage();
                    String id = a[3];
                    long holdMs = Long.parseLong(a[4]);
                    int iterations = Integer.parseInt(optArg(a, 5, "1"));
                    for (int i = 0; i < iterations; i++) {
                        LeaderLatch latch = new LeaderLatch(c, path, id);
                        latch.addListener(new LeaderLatchListener() {
                            @Override public void isLeader() {}
                            @Override public void notLeader() { markLost(); }
                        });
                        out("REQ " + now() + " latch " + id);
                        latch.start();
                        latch.await();
                        beginHold("latch", id);
                        out("ACQ " + now() + " latch " + id + " " + lastComponent(latch.getOurPath()));
                        holdFor(holdMs);
                        endHold();
                        latch.close();
                    }
                    break;
                }
                case "semaphore": {
                    int permits = intArg(a, 3, "PERMITS");
                    int iterations = intArg(a, 4, "ITERATIONS");
                    long holdMs = intArg(a, 5, "HOLD_MS");
                    String id = optArg(a, 6, defaultId());
                    InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(c, path, permits);
                    sem.setNodeData(id.getBytes(StandardCharsets.UTF_8));
                    for (int i = 0; i < iterations; i++) {
                        out("REQ " + now() + " sem " + id);
                        Lease lease = sem.acquire();
                        beginHold("sem", id);
                        out("ACQ " + now() + " sem " + id + " " + lastComponent(lease.getNodeName()));
                        holdFor(holdMs);
                        endHold();
                        sem.returnLease(lease);
                    }
                    break;
                }
                default:
                    usage();
            }
            c.close();
            c = null;
            out("DONE");
            System.exit(0);
        } catch (Throwable t) {
            String msg = (t.getClass().getSimpleName() + ": " + t.getMessage()).replace('\n', ' ');
            out("ERR " + msg);
            if (c != null) {
                try { c.close(); } catch (Throwable ignored) {}
            }
            System.exit(1);
        }
    }
}
