require "open3"

def transcode(input)
  Open3.capture3("ffmpeg -i #{input} out.mp4") # want: command-injection
end

def list(dir)
  IO.popen(["ls", "-la", dir]).read
end
