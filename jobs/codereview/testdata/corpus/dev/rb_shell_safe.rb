require "open3"

def thumbnail(file)
  system("convert", file, "-resize", "100x100", "thumb.png")
end

def log(branch)
  out, _status = Open3.capture2("git", "log", "--oneline", branch)
  out
end

def uptime
  `uptime`
end
