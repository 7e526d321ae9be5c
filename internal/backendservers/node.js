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
// CPU clock around each burn (process.cpuUsage: the loop thread does
// nearly all of the process's work while it burns).
//
// usage: node node.js BACKEND_HOST:PORT BURN_MICROS
'use strict';
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
  if (!routes[name]) routes[name] = { requests: 0, burn_us: 0 };
  return routes[name];
}

function burn(r, units) {
  const t0 = cpuMicros();
  spin(Math.round(units * burnMicros * perMicro));
  r.burn_us += cpuMicros() - t0;
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
      call(next);
      return;
    }
    r.requests++;
    res.end('ok\n');
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
