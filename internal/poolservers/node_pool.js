// A Node server (plain http module) hashing with crypto.pbkdf2, which
// libuv runs on its thread pool, for reqprof's tests of worker pools a
// runtime hands its own work to: the loop thread reads and writes every
// connection, a pool thread that never touches a socket does the hashing.
//   /light  a pbkdf2 of N iterations
//   /heavy  4N iterations
//   /warm   a pbkdf2 of one iteration: to start the pool's threads and
//           open connections before a window
// N is chosen at startup for about BURN_MICROS µs of CPU, from pbkdf2Sync
// timed on the loop thread (the process's CPU clock, while nothing else
// runs): the cost of one iteration, which the server reports with its
// routes' requests and iterations. A job's CPU is then iterations times
// that cost.
// It speaks calserver's protocol: it prints "listening on IP:PORT", serves
// until SIGTERM, then prints its own figures as one JSON line.
//
// usage: node node_pool.js BURN_MICROS
'use strict';
const http = require('http');
const crypto = require('crypto');

const burnMicros = Number(process.argv[2]);

function cpuMicros() {
  const u = process.cpuUsage();
  return u.user + u.system;
}

// µs of CPU per pbkdf2 iteration, from the best of a few timed rounds:
// the fastest is the one least disturbed.
function calibrate() {
  crypto.pbkdf2Sync('warm', 'salt', 20000, 32, 'sha256');
  let best = Infinity;
  for (let round = 0; round < 5; round++) {
    const iterations = 100000;
    const t0 = cpuMicros();
    crypto.pbkdf2Sync('password', 'salt', iterations, 32, 'sha256');
    best = Math.min(best, (cpuMicros() - t0) / iterations);
  }
  return best;
}
const perIteration = calibrate();
const iterations = Math.max(1, Math.round(burnMicros / perIteration));

const routes = {};
function route(name) {
  if (!routes[name]) routes[name] = { requests: 0, iterations: 0, burn_us: 0 };
  return routes[name];
}

const plans = { '/light': 1, '/heavy': 4, '/warm': 0 };

const server = http.createServer((req, res) => {
  const units = plans[req.url];
  if (units === undefined) {
    res.writeHead(404);
    res.end();
    return;
  }
  const r = route(req.url);
  const n = units ? units * iterations : 1;
  crypto.pbkdf2('password', req.url, n, 32, 'sha256', (err) => {
    if (err) throw err;
    r.requests++;
    r.iterations += n;
    r.burn_us += n * perIteration;
    res.end('ok\n');
  });
});
server.keepAliveTimeout = 60000;
server.listen(0, '127.0.0.1', () => {
  const a = server.address();
  process.stdout.write(`listening on ${a.address}:${a.port}\n`);
});
process.on('SIGTERM', () => {
  process.stdout.write(JSON.stringify({ routes, per_iteration_us: perIteration, iterations }) + '\n', () => process.exit(0));
});
