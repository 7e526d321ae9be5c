<?php
// Two routes that spend their CPU in PHP functions of their own: /light
// in light_work, /heavy in heavy_work, each burning for the µs the
// LIGHT_US and HEAVY_US server variables give (php-fpm's pool env, or
// 2000 and 4000). nginx hands every path to this script.

// spin burns CPU for $us µs of the process's own CPU time.
function spin($us) {
    $end = getrusage()["ru_utime.tv_usec"] + getrusage()["ru_utime.tv_sec"] * 1000000 + $us;
    $x = 0;
    do {
        for ($i = 0; $i < 20000; $i++) { $x += $i * $i; }
        $ru = getrusage();
    } while ($ru["ru_utime.tv_usec"] + $ru["ru_utime.tv_sec"] * 1000000 < $end);
    return $x;
}

function light_work() { return spin((int)($_SERVER["LIGHT_US"] ?? 2000)); }
function heavy_work() { return spin((int)($_SERVER["HEAVY_US"] ?? 4000)); }

$path = parse_url($_SERVER["REQUEST_URI"], PHP_URL_PATH);
if ($path === "/light") {
    light_work();
} elseif ($path === "/heavy") {
    heavy_work();
}
$out = "ok\n";
header("Content-Length: " . strlen($out));
echo $out;
