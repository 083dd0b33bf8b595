// Failover timing of Apache Curator's LeaderLatch, for examples/bench_election.rs (which
// compiles and runs it against Debian's jars in /usr/share/java).
//
//   java -cp OUT:CP LatchBench CONNECT PATH CANDIDATES WARMUP CLEAN_ROUNDS EXPIRE_ROUNDS
//
// CANDIDATES LeaderLatch instances, each on its own CuratorFramework (own session, timeout
// 4 s), join PATH. Each round waits until every candidate has its node, then:
//   clean:  t0 = System.nanoTime(); leader.close()           -> its node is deleted
//   expire: t0 = System.nanoTime(); a second ZooKeeper handle resumes the leader's session
//           and closes it                                     -> the server ends the session
// and measures until the next candidate's LeaderLatchListener.isLeader() runs (t1). The old
// leader then joins again (a new latch after close; Curator's own reset after expiry).
//
// Output (stdout): READY, then "CLEAN <ns>" / "EXPIRE <ns>" per measured round (warm-up rounds
// are not printed), then DONE; ERR <message> on failure.

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooKeeper;

public class LatchBench {
    static final long WAIT_S = 30;

    /** (candidate index, nanoTime) of each isLeader() call. */
    static final LinkedBlockingQueue<long[]> ELECTED = new LinkedBlockingQueue<>();

    static CuratorFramework connect(String cs) throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.builder()
            .connectString(cs)
            .sessionTimeoutMs(4000)
            .connectionTimeoutMs(4000)
            .retryPolicy(new ExponentialBackoffRetry(100, 3))
            .ensembleTracker(false)
            .build();
        c.start();
        if (!c.blockUntilConnected(20, TimeUnit.SECONDS)) throw new IllegalStateException("cannot connect to " + cs);
        return c;
    }

    static LeaderLatch join(CuratorFramework c, String path, int i) throws Exception {
        LeaderLatch latch = new LeaderLatch(c, path, "java-" + i);
        latch.addListener(new LeaderLatchListener() {
            @Override public void isLeader() { ELECTED.add(new long[] {i, System.nanoTime()}); }
            @Override public void notLeader() {}
        });
        latch.start();
        return latch;
    }

    static long[] nextElected() throws Exception {
        long[] e = ELECTED.poll(WAIT_S, TimeUnit.SECONDS);
        if (e == null) throw new IllegalStateException("no leader elected within " + WAIT_S + " s");
        return e;
    }

    static void waitParticipants(LeaderLatch any, int n) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
        while (any.getParticipants().size() != n) {
            if (System.nanoTime() > deadline) throw new IllegalStateException("expected " + n + " participants");
            Thread.sleep(2);
        }
        Thread.sleep(5); // as the Rust side: let every watch be set
    }

    static void closeSession(String cs, CuratorFramework c) throws Exception {
        ZooKeeper old = c.getZookeeperClient().getZooKeeper();
        CountDownLatch connected = new CountDownLatch(1);
        ZooKeeper zk = new ZooKeeper(cs, 4000, e -> {
            if (e.getState() == Watcher.Event.KeeperState.SyncConnected) connected.countDown();
        }, old.getSessionId(), old.getSessionPasswd());
        if (!connected.await(WAIT_S, TimeUnit.SECONDS)) throw new IllegalStateException("cannot resume the session");
        zk.close();
    }

    public static void main(String[] a) {
        try {
            String cs = a[0], path = a[1];
            int n = Integer.parseInt(a[2]), warmup = Integer.parseInt(a[3]);
            int clean = Integer.parseInt(a[4]), expire = Integer.parseInt(a[5]);
            List<CuratorFramework> clients = new ArrayList<>();
            List<LeaderLatch> latches = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                clients.add(connect(cs));
                latches.add(join(clients.get(i), path, i));
                if (i == 0) nextElected(); // the first one leads; the others queue in order
            }
            System.out.println("READY");
            int leader = 0;
            for (int r = 0; r < warmup + clean; r++) {
                waitParticipants(latches.get(0), n);
                long t0 = System.nanoTime();
                latches.get(leader).close();
                long[] next = nextElected();
                if (r >= warmup) System.out.println("CLEAN " + (next[1] - t0));
                latches.set(leader, join(clients.get(leader), path, leader));
                leader = (int) next[0];
            }
            for (int r = 0; r < warmup + expire; r++) {
                waitParticipants(latches.get((leader + 1) % n), n);
                long t0 = System.nanoTime();
                closeSession(cs, clients.get(leader));
                long[] next = nextElected();
                while (next[0] == leader) next = nextElected(); // a stale call from the old session
                if (r >= warmup) System.out.println("EXPIRE " + (next[1] - t0));
                leader = (int) next[0];
            }
            for (LeaderLatch l : latches) l.close();
            for (CuratorFramework c : clients) c.close();
            System.out.println("DONE");
            System.exit(0);
        } catch (Throwable t) {
            System.out.println("ERR " + (t.getClass().getSimpleName() + ": " + t.getMessage()).replace('\n', ' '));
            System.exit(1);
        }
    }
}
