// A Node server (plain http module) hashing with crypto.pbkdf2, which
// libuv runs on its thread pool, for reqprof's tests of worker pools a
// runtime hands its own work to: the loop thread reads and writes every
// connection, a pool thread that never touches a socket does the hashing.
//   /light  a pbkdf2 of N iterations
//   /heavy  4N iterations
//   /warm   a pbkdf2 of N iterations: to open connections and compile
//           the routes' code before a window
// N is chosen at startup for about BURN_MICROS µs of CPU, from the cost
// of one iteration on the pool itself, under concurrency like the load's:
// batches of jobs of 4k and 20k iterations, four at a time, timed by the
// pool threads' own CPU clocks (their schedstat: the process's clock
// would take in the loop thread's compiles and collections, and V8's
// helper threads, which made the cost vary 25% from one start to the
// next). Their difference per iteration leaves out what a job costs
// besides its iterations (queuing, the hand-back), which both routes pay
// alike. That cost is the N of the routes only: the host's speed drifts
// by as much as 25% between a start and the load that follows. What the
// server reports is measured over the load itself: the pool threads' CPU
// while it served (from the same clocks), less what the calibration
// found a job costs besides its iterations, per iteration served, and
// each route's work its iterations times that, plus that fixed cost a job.
// The load is the requests after the /warm ones: the pool's CPU is read
// again at the first of them (the pool idle then, the warm-up answered),
// and /warm's jobs are left out of the figures, as the host may run them
// at another pace than the load (their iterations were 44% of a test's,
// and with them the routes' difference came out up to 12% off).
// It speaks calserver's protocol: it prints "listening on IP:PORT", serves
// until SIGTERM, then prints its own figures as one JSON line.
//
// usage: node node_pool.js BURN_MICROS
'use strict';
const fs = require('fs');
const http = require('http');
const crypto = require('crypto');

const burnMicros = Number(process.argv[2]);

function threadIds() {
  return fs.readdirSync('/proc/self/task');
}

// The CPU (µs) the threads tids have run, from their schedstat (read on
// the loop thread: a synchronous read uses no pool thread).
function threadsCpuMicros(tids) {
  let ns = 0;
  for (const tid of tids) {
    ns += Number(fs.readFileSync(`/proc/self/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
  }
  return ns / 1000;
}

// The pool's threads: libuv starts them at the first job.
let poolThreads = [];

// The pool threads' CPU (µs) for jobs pbkdf2 jobs of iterations each,
// four at a time.
function poolBatch(jobs, iterations) {
  return new Promise((resolve) => {
    const t0 = threadsCpuMicros(poolThreads);
    let started = 0, done = 0;
    const next = () => {
      if (started === jobs) return;
      started++;
      crypto.pbkdf2('password', 'salt' + started, iterations, 32, 'sha256', () => {
        done++;
        if (done === jobs) resolve(threadsCpuMicros(poolThreads) - t0);
        else next();
      });
    };
    for (let i = 0; i < 4; i++) next();
  });
}

// The pool's cost at startup: µs of CPU per pbkdf2 iteration (the median
// of five rounds' marginal cost) and what a job costs besides, from jobs
// of one iteration (the median of five rounds: as the intercept of the
// rounds above it would be the small rest of two large figures).
async function calibrate() {
  const before = new Set(threadIds());
  await poolBatch(8, 20000); // starts the pool's threads
  poolThreads = threadIds().filter((tid) => !before.has(tid));
  if (poolThreads.length === 0) throw new Error('no pool thread started');
  const perIteration = [], perJob = [];
  for (let round = 0; round < 5; round++) {
    const small = await poolBatch(40, 4000);
    const large = await poolBatch(40, 20000);
    perIteration.push((large - small) / (40 * 16000));
    perJob.push((await poolBatch(200, 1)) / 200);
  }
  const median = (xs) => xs.sort((a, b) => a - b)[2];
  return { perIteration: median(perIteration), perJob: median(perJob) };
}

let calibrated, iterations; // set before the server listens
let poolCpuAtLoad; // at the first request after the warm-up
const served = { jobs: 0, iterations: 0 };
const routes = {};
function route(name) {
  if (!routes[name]) routes[name] = { requests: 0, iterations: 0, burn_us: 0 };
  return routes[name];
}

const plans = { '/light': 1, '/heavy': 4, '/warm': 1 };

const server = http.createServer((req, res) => {
  const units = plans[req.url];
  if (units === undefined) {
    res.writeHead(404);
    res.end();
    return;
  }
  const r = route(req.url);
  const n = units * iterations;
  const load = req.url !== '/warm';
  if (load && poolCpuAtLoad === undefined) poolCpuAtLoad = threadsCpuMicros(poolThreads);
  crypto.pbkdf2('password', req.url, n, 32, 'sha256', (err) => {
    if (err) throw err;
    r.requests++;
    r.iterations += n;
    if (load) {
      served.jobs++;
      served.iterations += n;
    }
    res.end('ok\n');
  });
});
server.keepAliveTimeout = 60000;
calibrate().then((cost) => {
  calibrated = cost;
  iterations = Math.max(1, Math.round(burnMicros / cost.perIteration));
  server.listen(0, '127.0.0.1', () => {
    const a = server.address();
    process.stdout.write(`listening on ${a.address}:${a.port}\n`);
  });
});
process.on('SIGTERM', () => {
  const poolCpu = poolCpuAtLoad === undefined ? 0 : threadsCpuMicros(poolThreads) - poolCpuAtLoad;
  const perIteration = served.iterations ? (poolCpu - served.jobs * calibrated.perJob) / served.iterations : 0;
  for (const r of Object.values(routes)) r.burn_us = r.iterations * perIteration + r.requests * calibrated.perJob;
  process.stdout.write(JSON.stringify({
    routes,
    per_iteration_us: perIteration,
    calibrated_per_iteration_us: calibrated.perIteration,
    per_job_us: calibrated.perJob,
    pool_cpu_us: poolCpu,
    iterations,
    pool_threads: poolThreads.length,
  }) + '\n', () => process.exit(0));
});
