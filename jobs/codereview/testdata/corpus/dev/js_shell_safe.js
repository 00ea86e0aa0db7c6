const { execFile, spawn, exec } = require("child_process");

function log(branch, cb) {
  execFile("git", ["log", "--oneline", branch], cb);
}

function list(dir) {
  return spawn("ls", ["-la", dir]);
}

function disk(cb) {
  exec("df -h", cb);
}
