const { exec } = require("child_process");
const child_process = require("child_process");

function thumbnail(file, cb) {
  exec(`convert ${file} -resize 100x100 thumb.png`, cb); // want: command-injection
}

function log(branch) {
  return child_process.execSync("git log --oneline " + branch).toString(); // want: command-injection
}
