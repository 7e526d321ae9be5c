// An HTTP/1.1 server whose two routes spend their CPU in JavaScript
// functions of their own: GET /light in lightWork, GET /heavy in
// heavyWork, each burning for the µs its argument gives (light, heavy).
// It says "listening on ADDR" once it serves, and on SIGTERM prints its
// requests by path as one JSON line and exits. Run it with
// --perf-basic-prof for V8 to name its compiled code in /tmp/perf-PID.map.
'use strict';
const http = require('http');

const [lightUs, heavyUs] = process.argv.slice(2, 4).map(Number);
const served = {};

// spin burns CPU for us µs of the process's CPU clock.
function spin(us) {
  const end = process.cpuUsage().user + us;
  let x = 0;
  while (process.cpuUsage().user < end) {
    for (let i = 0; i < 20000; i++) x += i * i;
  }
  return x;
}

function lightWork() { return spin(lightUs); }
function heavyWork() { return spin(heavyUs); }

const routes = { '/light': lightWork, '/heavy': heavyWork };

const server = http.createServer((req, res) => {
  const work = routes[req.url];
  if (work) work();
  served[req.url] = (served[req.url] || 0) + 1;
  res.writeHead(200, { 'Content-Length': '3' });
  res.end('ok\n');
});

process.on('SIGTERM', () => {
  process.stdout.write(JSON.stringify({ requests: served }) + '\n', () => process.exit(0));
});

server.listen(0, '127.0.0.1', () => {
  console.log(`listening on 127.0.0.1:${server.address().port}`);
});
