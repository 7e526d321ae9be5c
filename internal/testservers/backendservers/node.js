// A Node server (plain http module) whose requests call a backend midway,
// for reqprof's tests of requests that wait on a backend. Each route burns
// a calibrated amount of CPU, calls the backend, and burns again:
//   /light  B, call, B
//   /heavy  4B, call, 4B
//   /two    B, call, B, call, B
//   /twoheavy  B, call, 4B, call, B
//   /warm   a call, no burn: to open the pool of backend connections
// It speaks calserver's protocol: it prints "listening on IP:PORT", serves
// until SIGTERM, then prints its own figures as one JSON line: per route
// the requests served and the CPU its burns took, read from the process's
// CPU clock around each burn (process.cpuUsage; Node 20 has no clock of
// one thread), and the CPU of all its JS timed so: the burns, each call's
// setup and the response's end (work_us). What runs right after a longer
// burn runs slower: the setup of the call after 4 units took 6.5 to 7.6 µs
// more than after 1 (2026-12-06, 3 runs), work of the request that the
// burns alone do not show. That clock is the loop thread's only when V8
// has no background threads at work, so the server must run with
//   --single-threaded  V8's background tasks on the loop thread: otherwise
//                      its helper threads, no request's, took 11.6% of the
//                      process's CPU under reqprof's tests' load (mostly
//                      concurrent compiles), and a burn counted whatever of
//                      it ran meanwhile, the more the longer the burn;
//   --max-opt=1        no optimizing compiler: once on the loop thread, each
//                      of its compiles (2 to 8 ms) lands in whichever
//                      request runs, a few dozen a run, noise on the
//                      routes' means that their burns do not see.
//
// usage: node --single-threaded --max-opt=1 node.js BACKEND_HOST:PORT BURN_MICROS
'use strict';
const usage = 'usage: node --single-threaded --max-opt=1 node.js BACKEND_HOST:PORT BURN_MICROS';
if (!process.execArgv.includes('--single-threaded') || !process.execArgv.includes('--max-opt=1') ||
    process.argv.length !== 4) {
  console.error(usage);
  process.exit(2);
}
const http = require('http');

const [backendHost, backendPort] = process.argv[2].split(':');
const burnMicros = Number(process.argv[3]);

let sink = 1;
function spin(n) {
  let x = sink | 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
  }
  sink = x;
}

function cpuMicros() {
  const u = process.cpuUsage();
  return u.user + u.system;
}

// Rounds of spin per µs of CPU, once warm.
function calibrate() {
  spin(5e6);
  let n = 1e6;
  for (;;) {
    const t0 = cpuMicros();
    spin(n);
    const took = cpuMicros() - t0;
    if (took >= 200000) return n / took;
    n *= 2;
  }
}
const perMicro = calibrate();

const routes = {};
function route(name) {
  if (!routes[name]) routes[name] = { requests: 0, burn_us: 0, work_us: 0 };
  return routes[name];
}

function burn(r, units) {
  r.burn_us += timed(r, () => spin(Math.round(units * burnMicros * perMicro)));
}

// timed runs f, adds the CPU it took to r's work and returns it.
function timed(r, f) {
  const t0 = cpuMicros();
  f();
  const took = cpuMicros() - t0;
  r.work_us += took;
  return took;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
function call(done) {
  const req = http.get({ host: backendHost, port: backendPort, path: '/backend', agent }, (res) => {
    res.resume();
    res.on('end', done);
  });
  req.on('error', (e) => { console.error(e); process.exit(1); });
}

const plans = { '/light': [1, 1], '/heavy': [4, 4], '/two': [1, 1, 1], '/twoheavy': [1, 4, 1], '/warm': [0, 0] };

const server = http.createServer((req, res) => {
  const plan = plans[req.url];
  if (!plan) {
    res.writeHead(404);
    res.end();
    return;
  }
  const r = route(req.url);
  let step = 0;
  const next = () => {
    burn(r, plan[step]);
    step++;
    if (step < plan.length) {
      timed(r, () => call(next));
      return;
    }
    r.requests++;
    timed(r, () => res.end('ok\n'));
  };
  next();
});
server.keepAliveTimeout = 60000;
server.listen(0, '127.0.0.1', () => {
  const a = server.address();
  process.stdout.write(`listening on ${a.address}:${a.port}\n`);
});
process.on('SIGTERM', () => {
  process.stdout.write(JSON.stringify({ routes, per_micro: perMicro }) + '\n', () => process.exit(0));
});
